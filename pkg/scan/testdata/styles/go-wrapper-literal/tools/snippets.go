// Written for effectfence's scanner tests: a wrapper constructor around a go-sdk mcp.Tool
// literal, one exported function per tool, the handler inline.
package tools

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func ListSnippets(t Translator) ServerTool {
	return NewTool(
		ToolsetSnippets,
		mcp.Tool{
			Name:        "list_snippets",
			Description: t("LIST", "List snippets"),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
		},
		nil,
		func(ctx context.Context, deps Deps, _ *mcp.CallToolRequest, args map[string]any) (*mcp.CallToolResult, any, error) {
			items, _, err := deps.Client.Snippets.List(ctx, nil)
			return textResult(items), nil, err
		},
	)
}

func PublishSnippet(t Translator) ServerTool {
	return NewTool(
		ToolsetSnippets,
		mcp.Tool{
			Name:        "publish_snippet",
			Description: t("PUBLISH", "Publish a snippet"),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false},
		},
		nil,
		func(ctx context.Context, deps Deps, _ *mcp.CallToolRequest, args map[string]any) (*mcp.CallToolResult, any, error) {
			s, _, err := deps.Client.Snippets.Create(ctx, args["body"].(string))
			return textResult(s), nil, err
		},
	)
}
