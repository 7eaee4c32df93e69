// Package demo is `effectfence demo`: a built-in raw MCP server whose tools really execute
// (in-process, nothing real is charged) and write down every execution, and the two acts that
// show twelve identical concurrent calls against it directly and through `effectfence wrap`.
//
// The binary talks to itself: the demo spawns `effectfence demo-server` as an ordinary MCP
// stdio child, so nothing needs installing and every byte crosses a real process boundary.
// Executions are measured by the server's own effects file, one line per execution, never
// inferred from the answers.
package demo
