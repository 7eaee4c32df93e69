// Package ship holds no code: its tests check what a release ships besides the binary, the
// files a person edits by hand and a release must keep in step. server.json (the official
// MCP Registry's entry) against the registry's schema version it names and the release
// policy of docs/RELEASING.md; the Dockerfile and .goreleaser.yaml against server.json; the
// compose example against the gateway's documented flags.
package ship
