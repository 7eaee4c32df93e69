package wrap

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/internal/mcpheader"
)

// toolInfo is what wrap needs to know about one of the child's tools. The tool's definition
// itself is never re-encoded: tools/list results are passed to the agent as the child wrote
// them.
type toolInfo struct {
	readOnly bool
	// keyProp is the idempotency-key-like string property of the input schema, if any, and
	// keyForm the form of the key its schema admits (see keySchema.form).
	keyProp string
	keyForm keyForm
	// repeatProp: the schema itself declares RepeatArg, so it is the tool's own argument and
	// is forwarded.
	repeatProp bool
	// outputSchema: the tool declares an output schema, so MCP's SDK clients refuse a result
	// of it that has no structuredContent unless it is marked isError.
	outputSchema bool
	// params are the arguments the schema asks HTTP clients to mirror into Mcp-Param-*
	// headers (SEP-2243), which an HTTP front checks against the body.
	params []mcpheader.Param
}

// toolPage is what wrap reads of one tools/list result (parseTools).
type toolPage struct {
	Tools      []json.RawMessage
	NextCursor string
}

// listedTool is what wrap reads of one tool of a listing. Each is read on its own: a tool
// whose name is not a string is left out (no call can name it), and hints of the wrong types
// count as not given, so one odd entry never makes the others unknown. Members are read as
// MCP's SDKs read them, spelled so (escapes decoded): encoding/json also took "Annotations"
// and "ReadOnlyHint" for them, which the TypeScript SDK drops, and passed such a tool through
// unfenced although no client reads it as read-only.
type listedTool struct {
	Name         string
	InputSchema  json.RawMessage
	Annotations  json.RawMessage
	OutputSchema json.RawMessage
}

// readListed reads one entry of a listing; ok is false when it is not an object with a string
// name.
func readListed(raw json.RawMessage) (t listedTool, ok bool) {
	name := jsonrpc.MemberValue(raw, "name")
	if len(name) == 0 || name[0] != '"' {
		return t, false
	}
	t.Name = jsonrpc.Unquote(name)
	t.InputSchema = jsonrpc.MemberValue(raw, "inputSchema")
	t.Annotations = jsonrpc.MemberValue(raw, "annotations")
	t.OutputSchema = jsonrpc.MemberValue(raw, "outputSchema")
	return t, true
}

// readOnlyHint reports whether annotations say "readOnlyHint": true, exactly; anything
// else (absent, false, "yes", 1, "ReadOnlyHint", annotations that are not an object) leaves
// the tool fenced.
func readOnlyHint(annotations json.RawMessage) bool {
	return string(jsonrpc.MemberValue(annotations, "readOnlyHint")) == "true"
}

// parseTools reads what wrap needs from one tools/list result page. Its members, "tools"
// and "nextCursor", are read as MCP's SDKs read them, spelled so (the last of each, escapes
// decoded): encoding/json also took "Tools" for "tools", and the last of them, so a result
// giving a tool that may write in "tools" and then read-only in "Tools", whose tools are
// "tools" to the TypeScript SDK, passed that tool through unfenced.
func parseTools(raw json.RawMessage) (map[string]toolInfo, string, error) {
	var p toolPage
	if !json.Valid(raw) {
		return nil, "", fmt.Errorf("tools/list result: not valid JSON")
	}
	if i := jsonrpc.SkipSpace(raw, 0); raw[i] != '{' && string(raw[i:]) != "null" {
		return nil, "", fmt.Errorf("tools/list result: not an object: %.100s", raw)
	}
	if tools := jsonrpc.MemberValue(raw, "tools"); tools != nil {
		if err := json.Unmarshal(tools, &p.Tools); err != nil {
			return nil, "", fmt.Errorf("tools/list result: \"tools\": %v", err)
		}
	}
	if next := jsonrpc.MemberValue(raw, "nextCursor"); next != nil {
		if err := json.Unmarshal(next, &p.NextCursor); err != nil {
			return nil, "", fmt.Errorf("tools/list result: \"nextCursor\": %v", err)
		}
	}
	out := make(map[string]toolInfo, len(p.Tools))
	for _, rawTool := range p.Tools {
		t, ok := readListed(rawTool)
		if !ok {
			continue
		}
		// The properties are walked, not decoded: only a key-like one's schema is read (a
		// listing of 32,768 properties decoded whole allocated 19 times its size).
		repeat, keys := false, map[string][]byte{}
		if props := jsonrpc.MemberValue(t.InputSchema, "properties"); len(props) > 0 && props[0] == '{' {
			for m := range jsonrpc.Members(props) {
				switch name := jsonrpc.Unquote(props[m.Key:m.KeyEnd]); {
				case name == RepeatArg:
					repeat = true
				case keyLike(name):
					keys[name] = props[m.Start:m.End] // the last of a name, as JSON.parse reads it
				}
			}
		}
		info := toolInfo{readOnly: readOnlyHint(t.Annotations), repeatProp: repeat, params: mcpheader.Params(t.InputSchema),
			outputSchema: len(t.OutputSchema) > 0 && t.OutputSchema[0] == '{'}
		names := make([]string, 0, len(keys))
		for name := range keys {
			names = append(names, name)
		}
		sort.Strings(names) // deterministic when a schema has two key-like properties
		for _, name := range names {
			k, ok := readKeySchema(keys[name])
			if !ok {
				continue
			}
			if f, ok := k.form(); ok {
				info.keyProp, info.keyForm = name, f
				break
			}
		}
		out[t.Name] = listedAgain(out, t.Name, info)
	}
	return out, p.NextCursor, nil
}

// listedAgain returns what is known of tool name once info, one more entry of it in a listing,
// is read: a server that lists a tool twice (registered twice, or a listing merged from two
// sources) may say it is read-only in one entry and not in the other, and which an agent reads
// is anyone's guess, so the tool is read-only only when every entry says so (the last entry
// read passed it through unfenced). The rest is the last entry's.
func listedAgain(known map[string]toolInfo, name string, info toolInfo) toolInfo {
	if prev, ok := known[name]; ok && !prev.readOnly {
		info.readOnly = false
	}
	return info
}

// keySchema is what wrap reads of a property's schema to tell whether it may inject the
// intent's hash there (readKeySchema).
type keySchema struct {
	Type, Format, Pattern, Enum, Const json.RawMessage
	MaxLength, MinLength               *float64
	AnyOf, OneOf, AllOf                []keySchema
}

// readKeySchema reads a property's schema (valid JSON) as JSON Schema validators read it (ajv,
// which the TypeScript SDK uses, pydantic): its keywords spelled so, the last of a name.
// Before 2026-12-07 encoding/json read it, which also takes a member named so but for case
// and keeps the last: a "MaxLength" of 100 after a "maxLength" of 40 had the whole hash
// injected and the server refused every call left without a key, and a "Pattern", no keyword,
// left the key out (TestKeySchemaIsReadAsJSONSchemaReadsIt). ok is false for a schema that is
// not an object or whose keywords wrap reads have the wrong types: the key is left to the
// agent.
func readKeySchema(raw json.RawMessage) (k keySchema, ok bool) {
	if len(raw) == 0 || raw[0] != '{' {
		return k, false
	}
	length := func(name string, into **float64) bool {
		v := jsonrpc.MemberValue(raw, name)
		return v == nil || json.Unmarshal(v, into) == nil
	}
	branches := func(name string, into *[]keySchema) bool {
		v := jsonrpc.MemberValue(raw, name)
		if v == nil || string(v) == "null" {
			return true
		}
		var items []json.RawMessage
		if json.Unmarshal(v, &items) != nil {
			return false
		}
		*into = make([]keySchema, 0, len(items)) // [] is a branch list none of which admits a key
		for _, item := range items {
			b, ok := readKeySchema(item)
			if !ok {
				return false
			}
			*into = append(*into, b)
		}
		return true
	}
	k.Type, k.Format, k.Pattern = jsonrpc.MemberValue(raw, "type"), jsonrpc.MemberValue(raw, "format"), jsonrpc.MemberValue(raw, "pattern")
	k.Enum, k.Const = jsonrpc.MemberValue(raw, "enum"), jsonrpc.MemberValue(raw, "const")
	ok = length("maxLength", &k.MaxLength) && length("minLength", &k.MinLength) &&
		branches("anyOf", &k.AnyOf) && branches("oneOf", &k.OneOf) && branches("allOf", &k.AllOf)
	return k, ok
}

// keyForm is how the key wrap injects is made from the call's hash (64 lower-case hex digits):
// the hash itself (0), its first n digits (n, at least minKeyLen), or a UUID (uuidKey).
type keyForm int

const uuidKey keyForm = -1

// minKeyLen is the fewest digits of the hash a key is cut to: 128 bits.
const minKeyLen = 32

// key is the key of form f for hash.
func (f keyForm) key(hash string) string {
	switch {
	case f == uuidKey:
		return uuidOf(hash)
	case f > 0 && int(f) < len(hash):
		return hash[:f]
	}
	return hash
}

// uuidOf writes the first 32 digits of hash as a UUID of version 8 (RFC 9562: bits the
// application chooses) with the RFC's variant, which every UUID check accepts.
func uuidOf(hash string) string {
	b := []byte(hash[:32])
	b[12] = '8'
	b[16] = "89ab"[strings.IndexByte("0123456789abcdef", b[16])&3]
	return string(b[:8]) + "-" + string(b[8:12]) + "-" + string(b[12:16]) + "-" + string(b[16:20]) + "-" + string(b[20:32])
}

// form returns the form of key the property's schema admits, and false when none does. The
// key is the call's hash, 64 hex digits, where the schema takes it; else, for a schema that
// asks for a shorter string (a maxLength of at least minKeyLen: Square's keys are at most 45
// characters) its first digits, and for one that asks for a UUID (format "uuid") a UUID made
// of them. A pattern, an enum, a const, another format or a shorter maxLength is left to the
// agent: the server would refuse every call the agent left without a key (the TypeScript SDK
// checks arguments against the schema before the tool runs, and pydantic in Python's), and
// before 2026-12-06 every such call was refused (TestInjectedKeyMeetsTheSchema). The
// constraints may sit in the branches of anyOf or oneOf (Python's `str | None` with a
// max_length), one of which must admit the key, or of allOf, each of which must.
func (k keySchema) form() (keyForm, bool) {
	const sample = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	// The most digits first: a UUID carries 122 bits of the hash, a prefix of 32 digits 128.
	forms := []keyForm{0}
	ns := k.maxLengths(nil)
	slices.Sort(ns)
	for _, n := range slices.Backward(ns) {
		if n >= minKeyLen && n < len(sample) {
			forms = append(forms, keyForm(n))
		}
	}
	forms = append(forms, uuidKey)
	for _, f := range forms {
		if k.admits(f.key(sample)) {
			return f, true
		}
	}
	return 0, false
}

// maxLengths appends the maxLength of the schema and of its branches to ns.
func (k keySchema) maxLengths(ns []int) []int {
	if k.MaxLength != nil && *k.MaxLength >= 0 && *k.MaxLength <= 1<<20 {
		ns = append(ns, int(*k.MaxLength))
	}
	for _, bs := range [][]keySchema{k.AllOf, k.AnyOf, k.OneOf} {
		for _, b := range bs {
			ns = b.maxLengths(ns)
		}
	}
	return ns
}

// admits reports whether the schema admits the string key (of hex digits, or a UUID).
func (k keySchema) admits(key string) bool {
	n := float64(len(key))
	if !stringTyped(k.Type) || k.MaxLength != nil && *k.MaxLength < n || k.MinLength != nil && *k.MinLength > n ||
		k.Enum != nil || k.Const != nil || k.Pattern != nil && !matches(k.Pattern, key) {
		return false
	}
	if k.Format != nil && (string(k.Format) != `"uuid"` || !isUUID(key)) {
		return false
	}
	for _, b := range k.AllOf {
		if !b.admits(key) {
			return false
		}
	}
	for _, branches := range [][]keySchema{k.AnyOf, k.OneOf} {
		if branches != nil && !slices.ContainsFunc(branches, func(b keySchema) bool { return b.admits(key) }) {
			return false
		}
	}
	return true
}

// matches reports whether the schema's pattern (an ECMA-262 regular expression, unanchored)
// matches key, as far as Go's regexp can tell: a pattern it cannot compile matches nothing,
// and the key is left to the agent. The patterns key schemas carry (a UUID's, a set of
// characters with a length) mean the same in both.
func matches(pattern json.RawMessage, key string) bool {
	var p string
	if json.Unmarshal(pattern, &p) != nil || len(p) > 4096 {
		return false
	}
	re, err := regexp.Compile(p)
	return err == nil && re.MatchString(key)
}

// isUUID reports whether s is a UUID as uuidOf writes one: 8-4-4-4-12 lower-case hex digits.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case (c < '0' || c > '9') && (c < 'a' || c > 'f'):
			return false
		}
	}
	return true
}

// stringTyped reports whether a schema "type" admits a string (absent admits anything).
func stringTyped(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return true
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return one == "string"
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		for _, t := range many {
			if t == "string" {
				return true
			}
		}
	}
	return false
}

// toolCache is wrap's view of the child's tools, refreshed from every tools/list the agent
// makes and on notifications/tools/list_changed. A listing is of one life of the server (a
// child process, an upstream session): life names it, and a listing of another life counts as
// none (see toolInfo). Before 2026-12-07 a listing outlived its life: a restarted child, or a
// server restarted behind an upstream URL, that listed a tool read-only before and may write
// now had that tool's calls passed through unfenced, judged by the previous life's listing.
type toolCache struct {
	mu     sync.RWMutex
	tools  map[string]toolInfo
	loaded bool
	// life is the session the listing was read from; digest is the hash of that whole
	// listing as the server wrote it (every page), when it is known (digested).
	life       Conn
	digest     [sha256.Size]byte
	digested   bool
	overflowed bool // merge has left tools out (logged once)
	// stale: a refresh after list_changed failed, so the listing in place is of before a
	// change the server announced and judges no call (getOf); the next call lists again.
	stale bool
	// listing is held through a whole refresh, so refreshes run one at a time and an older
	// listing never overwrites a newer one. It is taken within the refresh's context: a
	// refresh held by a server that does not answer (stopped) must not hold the next past
	// that one's bound.
	listing ctxLock
	changes changes
	// live is the listing of the live session under way (listLive), shared by the calls that
	// wait for it; guarded by changes.mu.
	live *liveListing
	// news counts the list_changed notifications seen: a listing the agent asked for before
	// the latest one may be older than the refresh that notification caused (learned).
	news atomic.Uint64
	// whole, when set, is shown every whole listing refresh takes (every page, none left out).
	whole func(map[string]toolInfo)
}

// ctxLock is a mutex whose Lock gives up when its context ends.
type ctxLock struct {
	once sync.Once
	ch   chan struct{}
}

// lock takes the lock, or returns ctx's error once ctx ends first.
func (l *ctxLock) lock(ctx context.Context) error {
	l.once.Do(func() { l.ch = make(chan struct{}, 1) })
	select {
	case l.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for another listing of the tools under way: %w", ctx.Err())
	}
}

func (l *ctxLock) unlock() { <-l.ch }

// liveListing is one listing of the live session (listLive): done is closed once it ended,
// with the session listed or the error that ended it.
type liveListing struct {
	done chan struct{}
	s    Conn
	err  error
}

// listLive starts the listing list makes of the live session, or joins the one under way. It
// runs on a goroutine of the cache's own, detached from the calls that wait for it, each
// within its own bound (toolInfo), in a context shutdown ends: a call that gives up on it
// does not cut it short for the others, nor for a server slower to start and list than one
// tool's wait.
func (c *toolCache) listLive(list func(context.Context) (Conn, error)) *liveListing {
	ch := &c.changes
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if c.live != nil {
		return c.live
	}
	r := &liveListing{done: make(chan struct{})}
	if ch.stopped {
		r.err = errors.New("wrap is stopping")
		close(r.done)
		return r
	}
	if ch.ctx == nil {
		ch.ctx, ch.cancel = context.WithCancel(context.Background())
	}
	ctx := ch.ctx
	c.live = r
	ch.wg.Add(1)
	go func() {
		defer ch.wg.Done()
		s, err := list(ctx)
		ch.mu.Lock()
		c.live = nil
		ch.mu.Unlock()
		r.s, r.err = s, err
		close(r.done)
	}()
	return r
}

// changes runs the refreshes that notifications/tools/list_changed asks for. They cannot run
// on the goroutine that delivers the child's notifications: mcpstdio hands the tools/list
// response over only after that goroutine is done with the notifications before it, the
// list_changed among them (see mcpstdio's package comment). So the handler only asks, and a
// goroutine owned here lists; list_changed arriving while it lists cause one more listing.
type changes struct {
	mu      sync.Mutex
	want    bool          // a list_changed arrived that no listing has started to cover
	idle    chan struct{} // closed when the running loop ends; nil when none runs
	stopped bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// changed asks for a refresh from the live session (session returns nil when none is up).
func (c *toolCache) changed(session func() Conn, logf func(string, ...any)) {
	c.news.Add(1)
	ch := &c.changes
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.stopped {
		return
	}
	ch.want = true
	if ch.idle != nil {
		return // the running loop will list again
	}
	if ch.ctx == nil {
		ch.ctx, ch.cancel = context.WithCancel(context.Background())
	}
	ch.idle = make(chan struct{})
	ch.wg.Add(1)
	go func() {
		defer ch.wg.Done()
		for {
			ch.mu.Lock()
			if !ch.want || ch.stopped {
				close(ch.idle)
				ch.idle = nil
				ch.mu.Unlock()
				return
			}
			ch.want = false
			ctx := ch.ctx
			ch.mu.Unlock()
			if s := session(); s != nil {
				ctx, cancel := context.WithTimeout(ctx, listChangedWait)
				if err := c.refresh(ctx, s); err != nil {
					logf("refreshing the tool list after list_changed: %v (calls list the tools again before they are judged)", err)
					c.mu.Lock()
					if c.life == s {
						c.stale = true
					}
					c.mu.Unlock()
				}
				cancel()
			}
		}
	}()
}

// listChangedWait bounds one refresh after list_changed.
const listChangedWait = 30 * time.Second

// settled waits, until ctx ends, for the refreshes asked for by list_changed so far: a
// tools/call the agent sends after it saw list_changed is judged by the new listing. Until a
// refresh ends the previous listing stays in place.
func (c *toolCache) settled(ctx context.Context) {
	c.settledWithin(ctx, 0)
}

// settledWithin is settled bounded by wait as well (0: no bound), which costs a timer only
// when a refresh is under way. It reports whether the refreshes ended (false: ctx or wait
// ended first, and the listing in place is of before the server's latest change).
func (c *toolCache) settledWithin(ctx context.Context, wait time.Duration) bool {
	c.changes.mu.Lock()
	idle := c.changes.idle
	c.changes.mu.Unlock()
	if idle == nil {
		return true
	}
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	select {
	case <-idle:
		return true
	case <-ctx.Done():
		return false
	}
}

// shutdown stops the refreshes (one in progress is cancelled) and waits for their goroutine.
func (c *toolCache) shutdown() {
	ch := &c.changes
	ch.mu.Lock()
	ch.stopped = true
	if ch.cancel != nil {
		ch.cancel()
	}
	ch.mu.Unlock()
	ch.wg.Wait()
}

func (c *toolCache) get(name string) (toolInfo, bool, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.tools[name]
	return t, ok, c.loaded
}

// getOf is get of the listing of life s: a listing of another life is none (loaded false).
func (c *toolCache) getOf(name string, s Conn) (toolInfo, bool, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if s == nil || c.life != s || c.stale {
		return toolInfo{}, false, false
	}
	t, ok := c.tools[name]
	return t, ok, c.loaded
}

// maxTools bounds the tools the cache knows: a server whose listing never ends (a cursor on
// every page) must not grow it for as long as the agent pages. A tool beyond it is treated as
// one missing from the listing: fenced (the safe side), with nothing known of its schema.
const maxTools = 65536

// merge records one page; the first page (no cursor) replaces what was known, and a tool a
// later page names again stays fenced if an earlier page said so (listedAgain). It reports
// whether it left tools out (maxTools) for the first time.
func (c *toolCache) merge(page map[string]toolInfo, first bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mergeLocked(page, first)
}

// mergeLocked is merge with c.mu held.
func (c *toolCache) mergeLocked(page map[string]toolInfo, first bool) bool {
	if first || c.tools == nil {
		c.tools = map[string]toolInfo{}
	}
	left := false
	for k, v := range page {
		if _, known := c.tools[k]; !known && len(c.tools) >= maxTools {
			left = true
			continue
		}
		if !first {
			v = listedAgain(c.tools, k, v) // named on an earlier page too
		}
		c.tools[k] = v
	}
	c.loaded = true
	if left && !c.overflowed {
		c.overflowed = true
		return true
	}
	return false
}

// seen is the count of list_changed notifications so far, taken as a listing is asked for.
func (c *toolCache) seen() uint64 { return c.news.Load() }

// learned records a page of a listing the agent asked for when seen gave asked, unless a
// list_changed came since: the server may have answered it with the tools of before that
// change, and it could arrive after the refresh the change caused and undo it (a tool made
// to write kept passing as read-only). That refresh, or the agent's next listing, has the
// tools of after. It reports whether the page was recorded and, as merge does, whether it
// left tools out for the first time.
//
// s is the session the page was read from and live the session live once it was read: a page
// of a session no longer live is of a past life and is not recorded, nor is a later page of a
// life whose first page was not; a first page of the live session begins that life's listing.
// whole is the page's raw result when it is the whole listing (one page), nil otherwise.
func (c *toolCache) learned(page map[string]toolInfo, first bool, asked uint64, s, live Conn, whole json.RawMessage) (recorded, left bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// A list_changed counted after this check has its refresh merge after this page, under
	// c.mu; one counted before it makes the check fail.
	if c.news.Load() != asked || s == nil || s != live || s != c.life && !first {
		return false, false
	}
	c.life = s
	if first {
		c.stale = false
	}
	h := sha256.New()
	pageDigest(h, whole)
	h.Sum(c.digest[:0])
	c.digested = first && whole != nil
	return true, c.mergeLocked(page, first)
}

// listFor makes sure the listing is of life s, listing s's tools when it is not (refresh).
// differs reports that it listed and the listing of the life before s is not known to be
// the same (a hash of the whole listing, as written, tells): the agent's view of the tools,
// taken from that life, may be stale.
func (c *toolCache) listFor(ctx context.Context, s Conn) (differs bool, err error) {
	if err := c.listing.lock(ctx); err != nil {
		return false, err
	}
	defer c.listing.unlock()
	c.mu.RLock()
	of, before, had, known := c.life == s && c.loaded && !c.stale, c.digest, c.life != nil, c.digested
	c.mu.RUnlock()
	if of {
		return false, nil
	}
	digest, whole, err := c.refreshLocked(ctx, s)
	if err != nil {
		return false, err
	}
	return had && (!known || !whole || digest != before), nil
}

// refresh lists every page of the child's tools (session s, which becomes the listing's life).
func (c *toolCache) refresh(ctx context.Context, s Conn) error {
	if err := c.listing.lock(ctx); err != nil {
		return err
	}
	defer c.listing.unlock()
	_, _, err := c.refreshLocked(ctx, s)
	return err
}

// pageDigest adds one page of a listing, as written, to the hash of the listing.
func pageDigest(h hash.Hash, raw json.RawMessage) {
	h.Write(bytes.TrimSpace(raw))
	h.Write([]byte{'\n'})
}

// refreshLocked is refresh with c.listing held. It returns the hash of every page as written,
// and whether that is the whole listing.
func (c *toolCache) refreshLocked(ctx context.Context, s Conn) (digest [sha256.Size]byte, whole bool, err error) {
	all := map[string]toolInfo{}
	cursor := ""
	h := sha256.New()
	for pages := 0; pages < 1000; pages++ {
		raw, err := listTools(ctx, s, cursor)
		if err != nil {
			return digest, false, err
		}
		page, next, err := parseTools(raw)
		if err != nil {
			return digest, false, err
		}
		pageDigest(h, raw)
		for k, v := range page {
			if _, known := all[k]; known || len(all) < maxTools {
				all[k] = listedAgain(all, k, v) // a tool listed on two pages
			}
		}
		if next == "" || len(all) >= maxTools {
			whole = next == "" && len(all) < maxTools
			break
		}
		cursor = next
	}
	h.Sum(digest[:0])
	c.mu.Lock()
	c.mergeLocked(all, true)
	c.life, c.digest, c.digested, c.stale = s, digest, whole, false
	c.mu.Unlock()
	if whole && c.whole != nil {
		c.whole(all)
	}
	return digest, whole, nil
}
