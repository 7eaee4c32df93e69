// Package scan reads an MCP server's source tree and reports the tools that could repeat an
// effect if an agent calls them twice, with the evidence for each.
//
// What it guarantees: every file under the root in a scanned language (TS/JS, Python, Go,
// Rust, Java, Ruby) is either read or listed as skipped with a reason (vendored, generated,
// tests and hidden folders are counted by rule; unreadable, binary, oversized, looping and
// too-deep entries are listed one by one); a bad root is ErrBadRoot; nothing inside the tree
// stops a scan. Every declared tool it recognises is reported, as a candidate or not, with
// the reason in words.
//
// What it does not do: decide. From source alone a double-fire can rarely be proven — the
// guard may live in the service a tool calls, and a write-sounding tool may only build a
// payload — so the report says "candidate" and lists its evidence: effect words in the tool's
// name, write sites in the tool's own code (its declaration, its dispatch branch, and helpers
// only it uses), guards and retries, and the repository's write sites as corroboration. It
// reads text with patterns and bracket matching, not a parser; docs/scan-evaluation.md
// measures how often that is right on real servers.
package scan
