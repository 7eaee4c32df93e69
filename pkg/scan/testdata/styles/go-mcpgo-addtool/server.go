// Written for effectfence's scanner tests: mcp-go AddTool(mcp.NewTool("x", ...), s.handleX)
// with the handlers as methods elsewhere in the file; one name through a typed constant.
package photos

import (
	"context"
	"os"

	"github.com/mark3labs/mcp-go/mcp"
)

type ToolName string

const (
	VIEW_PHOTO ToolName = "view_photo"
)

func (s *PhotoServer) register() {
	s.server.AddTool(mcp.NewTool(
		string(VIEW_PHOTO),
		mcp.WithDescription("Show a photo"),
		mcp.WithString("path", mcp.Required()),
	), s.handleViewPhoto)

	s.server.AddTool(mcp.NewTool(
		"duplicate_photo",
		mcp.WithDescription("Copy a photo to a new path"),
		mcp.WithString("from", mcp.Required()),
		mcp.WithString("to", mcp.Required()),
	), s.handleDuplicatePhoto)
}

func (s *PhotoServer) handleViewPhoto(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	b, err := os.ReadFile(req.GetString("path", ""))
	return mcp.NewToolResultText(string(b)), err
}

func (s *PhotoServer) handleDuplicatePhoto(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	b, err := os.ReadFile(req.GetString("from", ""))
	if err != nil {
		return nil, err
	}
	return mcp.NewToolResultText("copied"), os.WriteFile(req.GetString("to", ""), b, 0o644)
}
