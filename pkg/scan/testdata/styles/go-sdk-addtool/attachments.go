// Written for effectfence's scanner tests: go-sdk mcp.AddTool(server, &mcp.Tool{Name: ...},
// handlerFactory(deps)) under feature switches, the handlers returning closures.
package handlers

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func RegisterFileTools(server *mcp.Server, uc *UseCases, cfg *Config) {
	if cfg.Enabled("show_file") {
		mcp.AddTool(server, &mcp.Tool{Name: "show_file", Description: "Details of a file"}, handleShowFile(uc))
	}
	if cfg.Enabled("remove_file") {
		mcp.AddTool(server, &mcp.Tool{Name: "remove_file", Description: "Delete a file"}, handleRemoveFile(uc))
	}
}

func handleShowFile(uc *UseCases) func(context.Context, *mcp.CallToolRequest, FileArgs) (*mcp.CallToolResult, FileOut, error) {
	return func(ctx context.Context, _ *mcp.CallToolRequest, args FileArgs) (*mcp.CallToolResult, FileOut, error) {
		f, err := uc.Files.ShowFile(ctx, args.ID)
		return nil, FileOut{File: f}, err
	}
}

func handleRemoveFile(uc *UseCases) func(context.Context, *mcp.CallToolRequest, FileArgs) (*mcp.CallToolResult, FileOut, error) {
	return func(ctx context.Context, _ *mcp.CallToolRequest, args FileArgs) (*mcp.CallToolResult, FileOut, error) {
		return nil, FileOut{}, uc.Files.DeleteFile(ctx, args.ID)
	}
}
