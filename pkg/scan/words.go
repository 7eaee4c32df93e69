package scan

import (
	"strings"
	"unicode"
)

// splitWords splits an identifier or a tool name into lower-case words on camelCase,
// PascalCase, snake_case, kebab-case, dots, slashes and digits, so that
// "deriveIdempotencyKey", "derive_idempotency_key" and "derive-idempotency-key" all give
// [derive idempotency key], and "HTTPRequestID" gives [http request id].
func splitWords(s string) []string {
	var words []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			words = append(words, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	rs := []rune(s)
	for i, r := range rs {
		switch {
		case unicode.IsLetter(r):
			if unicode.IsUpper(r) && len(cur) > 0 {
				prev := rs[i-1]
				nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
				// fooBar -> foo|Bar ; HTTPRequest -> HTTP|Request
				if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
					flush()
				}
			}
			cur = append(cur, r)
		case unicode.IsDigit(r):
			cur = append(cur, r)
		default:
			flush()
		}
	}
	flush()
	return words
}

func wordSet(ws ...string) map[string]bool {
	m := make(map[string]bool, len(ws))
	for _, w := range ws {
		m[w] = true
	}
	return m
}

// effectWords are verbs (and a few verb-like nouns) whose presence in a tool's name says
// the tool changes something outside itself.
var effectWords = wordSet(
	"create", "insert", "add", "append", "upsert", "new", "register", "enroll", "provision",
	"update", "edit", "modify", "change", "set", "patch", "put", "replace", "rename", "move",
	"write", "save", "store", "upload", "copy", "duplicate", "clone", "import", "sync", "apply", "toggle", "mark", "label",
	"delete", "remove", "destroy", "drop", "truncate", "purge", "clear", "erase", "unlink",
	"send", "post", "publish", "notify", "email", "sms", "reply", "comment", "react", "dm",
	"invite", "share", "assign", "unassign", "approve", "reject", "dismiss", "resolve", "reopen",
	"close", "archive", "unarchive", "lock", "unlock", "pin", "unpin", "star", "unstar",
	"follow", "unfollow", "subscribe", "unsubscribe", "like", "vote", "minimize",
	"commit", "push", "merge", "rebase", "revert", "reset", "checkout", "stage", "unstage",
	"tag", "fork", "cherry", "squash",
	"deploy", "release", "rollback", "restore", "scale", "restart", "reboot", "start", "stop",
	"kill", "terminate", "shutdown", "pause", "resume", "suspend", "enable", "disable",
	"run", "execute", "exec", "invoke", "trigger", "dispatch", "enqueue", "schedule", "rerun",
	"install", "uninstall", "mount", "unmount", "attach", "detach", "grant", "revoke",
	"charge", "pay", "refund", "payout", "transfer", "withdraw", "deposit", "buy", "sell",
	"purchase", "order", "trade", "swap", "mint", "burn", "stake", "bid", "capture", "void",
	"finalize", "cancel", "book", "reserve", "submit", "sign", "increment", "decrement",
	"click", "fill", "press", "drag", "upgrade", "downgrade", "transition", "link",
	"allocate", "evict", "flush", "rotate", "spawn", "place", "seed", "populate", "offer",
	"drain", "dequeue", "pop", "refresh", "retry", "resubmit", "resend", "action",
)

// readWords are verbs that say a tool only looks. One in a tool's name, before any effect
// word, vetoes the effect words that follow ("get_update_status"), unless money words
// appear together with a write inside the tool's own block.
var readWords = wordSet(
	"get", "list", "search", "find", "read", "fetch", "query", "describe", "show", "view",
	"lookup", "retrieve", "check", "inspect", "count", "diff", "status", "validate", "verify",
	"preview", "estimate", "calculate", "analyze", "analyse", "explain", "summarize", "browse",
	"download", "watch", "tail", "poll", "ping", "health", "info", "whoami", "explore", "scan",
	"parse", "format", "render", "compare", "echo", "sum", "load", "peek",
	"audit", "test", "lint", "plan", "simulate", "dry", "quote", "suggest", "recommend",
	"translate", "convert", "extract", "open", "log", "logs", "history", "diagnose", "debug",
	"print", "help", "whois", "locate", "stat", "stats", "metrics", "trace", "evaluate",
)

// moneyWords mark effects that move money or value.
var moneyWords = wordSet(
	"charge", "charges", "pay", "payment", "payments", "payout", "payouts", "refund", "refunds",
	"transfer", "transfers", "invoice", "invoices", "subscription", "subscriptions", "price",
	"prices", "coupon", "coupons", "billing", "bill", "wallet", "balance", "fund",
	"funds", "money", "cash", "purchase", "buy", "sell", "order", "orders", "trade",
	"swap", "withdraw", "withdrawal", "deposit", "stripe", "paypal", "credit",
	"debit", "amount", "currency", "usd", "eur", "crypto", "btc", "eth",
	"mint", "stake", "tip", "donate", "donation", "escrow", "settlement",
)

// conjunctions join two verbs in one name ("get_or_create"); then the effect counts.
var conjunctions = wordSet("or", "and", "then")

// guardPhrases are word sequences that name a duplicate-suppression mechanism.
var guardPhrases = [][]string{
	{"idempotency"}, {"idempotent"}, {"idempotence"},
	{"request", "id"}, {"client", "token"}, {"client", "request", "token"},
	{"dedupe"}, {"dedup"}, {"deduplicate"}, {"deduplication"}, {"deduplicated"},
	{"upsert"}, {"on", "conflict"}, {"on", "duplicate", "key"}, {"insert", "ignore"},
	{"if", "not", "exists"}, {"attribute", "not", "exists"}, {"if", "none", "match"},
	{"conditional", "put"}, {"once", "key"}, {"exactly", "once"}, {"nonce"},
	{"unique", "key"}, {"operation", "id"}, {"message", "deduplication", "id"},
}

// retryWords mark code that sends the same thing again.
var retryWords = wordSet(
	"retry", "retries", "retried", "retrying", "retryable", "retrier", "backoff", "tenacity",
	"redeliver", "redelivery", "resend", "reattempt", "resilience4j", "failsafe",
)

// classification is the word-level verdict on a tool name, before block evidence.
type classification struct {
	effect  []string // effect words found
	read    []string // read verbs found
	money   []string // money words found
	vetoed  bool     // a read verb comes before every effect word
	neutral bool     // neither effect nor read words
}

func classifyName(name string) classification {
	ws := splitWords(name)
	var c classification
	firstEffect, firstRead := -1, -1
	conj := false
	for i, w := range ws {
		if effectWords[w] {
			c.effect = append(c.effect, w)
			if firstEffect < 0 {
				firstEffect = i
			}
		}
		if readWords[w] {
			c.read = append(c.read, w)
			if firstRead < 0 {
				firstRead = i
			}
		}
		if moneyWords[w] {
			c.money = append(c.money, w)
		}
		if conjunctions[w] {
			conj = true
		}
	}
	switch {
	case firstEffect < 0 && firstRead < 0:
		c.neutral = true
	case firstEffect < 0:
		c.vetoed = true
	case firstRead >= 0 && firstRead < firstEffect && !conj:
		c.vetoed = true
	}
	return c
}

// containsPhrase reports whether ws contains the phrase as consecutive words.
func containsPhrase(ws []string, phrase []string) bool {
	if len(phrase) == 0 || len(ws) < len(phrase) {
		return false
	}
outer:
	for i := 0; i+len(phrase) <= len(ws); i++ {
		for j, p := range phrase {
			if ws[i+j] != p {
				continue outer
			}
		}
		return true
	}
	return false
}
