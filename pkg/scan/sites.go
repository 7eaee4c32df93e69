package scan

import (
	"regexp"
	"strings"
)

// Site is one line of source that is evidence of something: a write, a guard, a retry.
type Site struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Kind string `json:"kind"` // writes: http, sql, file, sdk, process; guards: the phrase; retries: retry
	Text string `json:"text"` // the trimmed line, cut to 160 bytes
}

// Write-site patterns. HTTP verbs are matched on the raw line, so `method: cond ? "POST" :
// "GET"` counts as a possible write: a scan cannot evaluate the condition.
var (
	httpWriteRe = regexp.MustCompile(`["'` + "`" + `](?:POST|PUT|PATCH|DELETE)["'` + "`" + `]` +
		`|\bhttp\.Method(?:Post|Put|Patch|Delete)\b` +
		`|\bHttpMethod\.(?:POST|PUT|PATCH|DELETE)\b|\bMethod::(?:POST|PUT|PATCH|DELETE)\b` +
		`|\bNet::HTTP::(?:Post|Put|Patch|Delete)\b|@(?:Post|Put|Patch|Delete)Mapping\b` +
		`|\b(?:requests|httpx|axios|got|ky|superagent|Faraday|RestClient|HTTParty|reqwest|http|session|client|api|ctx\.client)\.(?:post|put|patch|delete)\s*\(` +
		`|\.(?:post|put|patch)\s*\(\s*["'` + "`" + `/]`)
	sqlWriteRe  = regexp.MustCompile(`(?i)\b(?:insert\s+(?:or\s+\w+\s+)?into|update\s+[\w."` + "`" + `\[\]]+\s+set|delete\s+from|merge\s+into|replace\s+into|truncate\s+table|drop\s+table|alter\s+table)\b`)
	fileWriteRe = regexp.MustCompile(`\bfs\.(?:promises\.)?(?:writeFile|writeFileSync|appendFile|appendFileSync|rename|renameSync|unlink|unlinkSync|rm|rmSync|rmdir|mkdir|mkdirSync|copyFile|createWriteStream)\b` +
		`|\bos\.(?:WriteFile|Create|Remove|RemoveAll|Rename|Mkdir|MkdirAll|OpenFile)\(` +
		`|\bioutil\.WriteFile\(|\bos\.(?:remove|unlink|rename|replace|makedirs|mkdir|rmdir)\(` +
		`|\bshutil\.(?:copy\w*|move|rmtree)\(|\bFile\.(?:write|delete|rename)\b|\bFileUtils\.\w+` +
		`|\bFiles\.(?:write|writeString|delete|move|copy|createFile|createDirectories)\(` +
		`|\b(?:std::)?fs::(?:write|remove_file|remove_dir_all|create_dir_all|rename|copy)\(` +
		`|\.write_(?:text|bytes)\s*\(|\bopen\([^)\n]*,\s*["'][wax]b?\+?["']` +
		`|\b(?:writeFile|appendFile|writeFileSync)\s*\(`)
	processRe = regexp.MustCompile(`\bsubprocess\.(?:run|call|Popen|check_call|check_output)\(|\bos\.system\(` +
		`|\bexec\.Command(?:Context)?\(|\bchild_process\b|\bexecSync\(|\bexecFile(?:Sync)?\(` +
		`|\bRuntime\.getRuntime\(\)\.exec\(|\bnew ProcessBuilder\(|\bCommand::new\(`)
)

// weakFirstWords start method names that are too often local bookkeeping (setTimeout,
// addEventListener, pushState) to count as writes on their own.
var weakFirstWords = wordSet("set", "add", "push", "append", "put", "clear", "stop", "start",
	"run", "link", "mark", "label", "store", "new", "load", "flush", "sync", "format", "sign",
	"register", "enable", "disable", "lock", "unlock", "toggle", "attach", "detach", "apply",
	"schedule", "execute", "exec", "invoke", "like", "close", "fill", "press", "click",
	"drag", "tag", "stage", "rotate", "release", "resolve", "order", "mount", "spawn",
	"kill", "pause", "resume", "emit", "increment", "decrement", "dispatch", "trigger", "react",
	"reset", "share", "move", "replace", "save", "write", "import", "install", "change")

// localFactories are receivers whose create/new builds a value in memory.
var localFactories = wordSetExact("URI", "URL", "Object", "axios", "z", "Map", "Set", "Array",
	"Promise", "Symbol", "Reflect", "Proxy", "Path", "Paths", "yup", "Joi", "Mockito", "React",
	"document", "crypto", "hashlib", "Date", "Buffer", "JSON", "uuid", "Uuid", "UUID", "Instant",
	"LocalDate", "Duration", "Pattern", "Regex", "regexp", "BigDecimal", "Optional")

// localObjects follow "create" in names of in-memory constructors: createServer, createHash.
var localObjects = wordSetExact("server", "interface", "hash", "element", "context", "logger",
	"client", "connection", "store", "slice", "selector", "app", "router", "transport",
	"reader", "writer", "buffer", "object", "instance", "signal", "ref", "memo", "root",
	"portal", "schema", "type", "parser", "agent", "proxy", "worker", "pool", "cipher",
	"decipher", "sign", "verify", "event", "error", "request", "response", "url", "uri",
	"tool", "tools", "mcp", "handler", "middleware", "component", "theme", "default", "empty",
	"text", "message", "result", "params", "args", "options", "config", "channel", "queue",
	"map", "set", "list", "array", "dict", "node", "tree", "graph", "span", "tracer", "meter",
	"counter", "gauge", "histogram", "spy", "mock", "stub", "fake")

// strongSingle are one-word method names that write wherever they are called.
var strongSingle = wordSet("create", "send", "publish", "upsert", "cancel", "transfer", "refund",
	"charge", "capture", "submit", "enqueue", "commit", "merge", "deploy", "upload", "invite",
	"approve", "destroy", "finalize", "pay", "payout", "withdraw", "deposit", "checkout",
	"purchase", "edit", "insert", "update", "delete", "remove", "post", "patch")

// chainOnly are one-word names that write only when called on an SDK-looking chain
// (a.b.update(...)), since map.delete(k) and dict.update(d) are local.
var chainOnly = wordSet("insert", "update", "delete", "remove", "patch", "post", "edit", "merge")

// sdkWrite reports whether a method call named name on receiver chain recv looks like a
// write through a client library.
func sdkWrite(recv, name string) bool {
	if recv == "" {
		return false // a bare function call; helpers are followed separately
	}
	ws := splitWords(name)
	if len(ws) == 0 || !effectWords[ws[0]] && !strongSingle[ws[0]] {
		return false
	}
	last := recv
	if i := strings.LastIndexByte(strings.TrimSuffix(recv, "."), '.'); i >= 0 {
		last = recv[i+1:]
	}
	if localFactories[strings.TrimSuffix(last, ".")] {
		return false
	}
	if len(ws) >= 2 {
		return !weakFirstWords[ws[0]] && !(ws[0] == "create" && localObjects[ws[1]])
	}
	w := ws[0]
	if !strongSingle[w] {
		return false
	}
	if w == "send" {
		for _, rw := range splitWords(recv) {
			if rw == "http" || rw == "request" || rw == "req" || rw == "builder" || rw == "chained" {
				return false // an HTTP client's send: the verb on the request decides
			}
		}
	}
	goStyle := name[0] >= 'A' && name[0] <= 'Z'
	if chainOnly[w] && !goStyle && strings.Count(recv, ".") < 2 {
		return false
	}
	return true
}

// commentLine reports whether a line is only a comment, so words in prose are not taken as
// code evidence.
func commentLine(l string) bool {
	t := strings.TrimSpace(l)
	for _, p := range []string{"//", "#", "*", "/*", "--", "\"\"\"", "'''"} {
		if strings.HasPrefix(t, p) {
			return !strings.HasPrefix(t, "#[") // Rust attributes are code
		}
	}
	return false
}

func clip(l string) string {
	t := strings.TrimSpace(l)
	if len(t) > 160 {
		t = t[:157] + "..."
	}
	return t
}

// fileSites collects the write, guard and retry sites of one file, at most one of each
// class per line.
func fileSites(s *source) (writes, guards, retries []Site) {
	for n := 1; n <= s.lineCount(); n++ {
		l := s.line(n)
		low := strings.ToLower(l)
		kind := writeKind(l, low)
		if kind == "" && s.lang == langRuby && rubyWriteCall(l) {
			kind = "sdk"
		}
		hasGuard := false
		for _, stem := range guardStems {
			if strings.Contains(low, stem) {
				hasGuard = true
				break
			}
		}
		hasRetry := false
		for _, stem := range retryStems {
			if strings.Contains(low, stem) {
				hasRetry = true
				break
			}
		}
		if kind == "" && !hasGuard && !hasRetry || commentLine(l) {
			continue
		}
		if kind != "" {
			writes = append(writes, Site{File: s.rel, Line: n, Kind: kind, Text: clip(l)})
		}
		if !hasGuard && !hasRetry {
			continue
		}
		ws := splitWords(l)
		if hasGuard && !containsPhrase(ws, []string{"idempotent", "hint"}) { // an MCP annotation claims, it does not guard
			for _, p := range guardPhrases {
				if containsPhrase(ws, p) {
					guards = append(guards, Site{File: s.rel, Line: n, Kind: strings.Join(p, " "), Text: clip(l)})
					break
				}
			}
		}
		if hasRetry {
			for _, w := range ws {
				if retryWords[w] {
					retries = append(retries, Site{File: s.rel, Line: n, Kind: "retry", Text: clip(l)})
					break
				}
			}
		}
	}
	return writes, guards, retries
}

// writeKind classifies one line as a write site, or returns "". Each pattern runs only on
// lines holding one of its literal stems.
func writeKind(l, low string) string {
	if !strings.ContainsAny(l, "(\"'`") {
		return "" // every write pattern needs a call or a quoted verb or statement
	}
	if (containsAny(l, "POST", "PUT", "PATCH", "DELETE", "Method", "Mapping", "Net::HTTP") || containsAny(low, ".post", ".put", ".patch", ".delete")) && httpWriteRe.MatchString(l) {
		return "http"
	}
	if containsAny(low, "insert ", "update ", "delete ", "merge ", "replace ", "truncate ", "drop ", "alter ") && sqlWriteRe.MatchString(l) {
		return "sql"
	}
	if containsAny(l, "fs.", "os.", "ioutil", "shutil", "File", "fs::", "write_", "open(", "writeFile", "appendFile") && fileWriteRe.MatchString(l) {
		return "file"
	}
	if containsAny(low, "subprocess", "system(", "exec", "child_process", "processbuilder", "command::new") && processRe.MatchString(l) {
		return "process"
	}
	if sdkCallIn(l) {
		return "sdk"
	}
	return ""
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// sdkCallIn reports whether a line calls a write method on a client: it reads each call's
// name and receiver chain backwards from its '('.
func sdkCallIn(l string) bool {
	for i := 0; i < len(l); i++ {
		if l[i] != '(' {
			continue
		}
		j := i
		for j > 0 && (l[j-1] == ' ' || l[j-1] == '\t') {
			j--
		}
		k := j
		for k > 0 && isIdentByte(l[k-1]) {
			k--
		}
		if k == j {
			continue
		}
		name := l[k:j]
		if !effectFirstWord(name) {
			continue
		}
		// the receiver chain: a.b.c. before the name, or a call result (x().name)
		r := k
		for r > 0 && l[r-1] == '.' {
			q := r - 1
			if q > 0 && l[q-1] == ')' {
				r = -1
				break
			}
			p := q
			for p > 0 && isIdentByte(l[p-1]) {
				p--
			}
			if p == q {
				r = -1 // a builder chain continued from the line above: .POST(...)
				break
			}
			r = p
		}
		recv := ""
		switch {
		case r < 0:
			recv = "chained.call."
		case r < k:
			recv = l[r:k]
		}
		if recv != "" && declaresFunction(l, name) {
			continue
		}
		if sdkWrite(recv, name) {
			return true
		}
	}
	return false
}

var rubyCallNoParens = regexp.MustCompile(`((?:[A-Za-z_]\w*\.)+)([a-z_]\w*[!?]?)\b`)

// rubyWriteCall finds write calls written without parentheses, as Ruby allows:
// doc.ref.delete, record.destroy!.
func rubyWriteCall(l string) bool {
	for _, m := range rubyCallNoParens.FindAllStringSubmatch(l, -1) {
		if effectFirstWord(strings.TrimRight(m[2], "!?")) && sdkWrite(m[1], strings.TrimRight(m[2], "!?")) {
			return true
		}
	}
	return false
}

// effectFirstWord cheaply checks whether an identifier's first word could be a write verb,
// before the full split.
func effectFirstWord(name string) bool {
	end := len(name)
	for i := 1; i < len(name); i++ {
		c := name[i]
		if c == '_' || c >= 'A' && c <= 'Z' && name[i-1] >= 'a' && name[i-1] <= 'z' {
			end = i
			break
		}
	}
	w := strings.ToLower(name[:end])
	return effectWords[w] || strongSingle[w]
}

var retryStems = []string{"retr", "backoff", "tenacity", "redeliver", "resend", "reattempt", "resilience4j", "failsafe"}

var guardStems = []string{"idempot", "request", "token", "dedup", "upsert", "conflict", "duplicate",
	"ignore", "exist", "match", "nonce", "unique", "operation", "once", "conditional"}

// declaresFunction reports whether line l defines (rather than calls) name.
func declaresFunction(l, name string) bool {
	t := strings.TrimSpace(l)
	for _, kw := range []string{"def ", "function ", "func ", "fn ", "async ", "public ", "private ", "protected ", "static "} {
		if strings.HasPrefix(t, kw) && strings.Contains(t, name) {
			return true
		}
	}
	// TS/JS class method: `createThing(args) {`
	return strings.HasPrefix(t, name+"(") && strings.HasSuffix(strings.TrimSpace(t), "{")
}
