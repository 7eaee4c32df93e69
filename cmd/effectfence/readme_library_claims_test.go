package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// readmeLibraryProgram is a user's program built on what the README's "Library quick start"
// says beside its snippet: a durable ledger from store.Open, replayed after a restart; a claim
// whose process was killed is fenced (CodeOf, errors.Is and errors.As); Release frees an
// intent, Abort fences it; PrepareWait waits for a concurrent duplicate and returns its cert;
// Heartbeat keeps a claim past its lease; a read set refuses a decision on state that moved;
// vector clocks tell concurrent decisions. It prints every refusal code it met.
const readmeLibraryProgram = `package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

func must(ok bool, f string, a ...any) {
	if !ok {
		fmt.Printf("FAIL: "+f+"\n", a...)
		os.Exit(3)
	}
}

var codes = map[string]bool{}

func code(err error) string { c := fence.CodeOf(err); codes[c] = true; return c }

func main() {
	ctx := context.Background()
	led, err := store.Open(ctx, store.Options{Ledger: os.Args[1], LeaseTTL: 4 * time.Second})
	must(err == nil, "store.Open: %v", err)
	defer led.Close()
	eng := led
	req := fence.Request{Intent: "charge:order-123", Tool: "charge_card", Args: []byte(` + "`" + `{"amount":4900}` + "`" + `), Domain: "order:123", Agent: "billing-agent"}
	switch os.Args[2] {
	case "commit":
		adm, err := eng.Prepare(ctx, req)
		must(err == nil && adm.Ticket != nil, "prepare: %+v %v", adm, err)
		_, err = eng.Commit(ctx, *adm.Ticket, []byte(` + "`" + `{"charge":"ch_1"}` + "`" + `))
		must(err == nil, "commit: %v", err)
		fmt.Println("committed")
	case "replay":
		adm, err := eng.Prepare(ctx, req)
		must(err == nil && adm.Cert != nil && string(adm.Cert.Result) == ` + "`" + `{"charge":"ch_1"}` + "`" + `, "after a restart: %+v %v", adm, err)
		fmt.Println("replayed")
	case "hold":
		adm, err := eng.Prepare(ctx, req)
		must(err == nil && adm.Ticket != nil, "prepare: %+v %v", adm, err)
		fmt.Println("holding")
		time.Sleep(time.Hour)
	case "orphaned":
		_, err := eng.Prepare(ctx, req)
		var pf fence.PriorFailureError
		must(code(err) == fence.CodePriorFailure && errors.Is(err, fence.ErrPriorFailure) && errors.As(err, &pf) && pf.State == fence.StateUnknown,
			"the claim of a killed process: %v", err)
		fmt.Println("fenced")
	case "rest":
		rest(ctx, eng.Engine)
		var seen []string
		for c := range codes {
			seen = append(seen, c)
		}
		sort.Strings(seen)
		fmt.Println(seen)
	}
}

func rest(ctx context.Context, eng *fence.Engine) {
	r := fence.Request{Intent: "abort", Tool: "t", Args: []byte("1")}
	adm, err := eng.Prepare(ctx, r)
	must(err == nil && adm.Ticket != nil, "prepare: %v", err)
	must(eng.Abort(ctx, *adm.Ticket, "timeout") == nil, "abort")
	_, err = eng.Prepare(ctx, r)
	must(code(err) == fence.CodePriorFailure, "after Abort: %v", err)

	r = fence.Request{Intent: "release", Tool: "t", Args: []byte("1")}
	adm, _ = eng.Prepare(ctx, r)
	must(eng.Release(ctx, *adm.Ticket, "declined before charging") == nil, "release")
	adm, err = eng.Prepare(ctx, r)
	must(err == nil && adm.Ticket != nil, "after Release: %+v %v", adm, err)
	_, err = eng.Prepare(ctx, r)
	var inflight fence.InFlightError
	must(code(err) == fence.CodeInFlight && errors.Is(err, fence.ErrInFlight) && errors.As(err, &inflight), "a duplicate in flight: %v", err)
	_, err = eng.Prepare(ctx, fence.Request{Intent: "release", Tool: "t", Args: []byte("2")})
	must(code(err) == fence.CodeConflict && errors.Is(err, fence.ErrConflict), "other args under the intent: %v", err)

	// Heartbeat: held for two and a half 4-second leases, the claim is still in flight.
	tk := *adm.Ticket
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		tk, err = eng.Heartbeat(ctx, tk)
		must(err == nil, "heartbeat: %v", err)
	}
	_, err = eng.Prepare(ctx, r)
	must(code(err) == fence.CodeInFlight, "after heartbeats: %v", err)
	_, err = eng.Commit(ctx, tk, []byte("1"))
	must(err == nil, "commit after heartbeats: %v", err)

	w := fence.Request{Intent: "wait", Tool: "t", Args: []byte("1")}
	first, _ := eng.Prepare(ctx, w)
	var wg sync.WaitGroup
	var got fence.Admission
	var gerr error
	wg.Add(1)
	go func() { defer wg.Done(); got, gerr = eng.PrepareWait(ctx, w, 30*time.Second) }()
	time.Sleep(200 * time.Millisecond)
	_, err = eng.Commit(ctx, *first.Ticket, []byte(` + "`" + `"first"` + "`" + `))
	must(err == nil, "commit: %v", err)
	wg.Wait()
	must(gerr == nil && got.Cert != nil && string(got.Cert.Result) == ` + "`" + `"first"` + "`" + `, "PrepareWait: %+v %v", got, gerr)

	seq, err := eng.Current(ctx, "pods")
	must(err == nil, "current: %v", err)
	a, err := eng.Prepare(ctx, fence.Request{Intent: "scale-a", Tool: "scale", Args: []byte("1"), Domain: "pods", ReadSet: []fence.ReadSetEntry{{Domain: "pods", Seq: seq}}})
	must(err == nil, "a decision on current state: %v", err)
	_, err = eng.Commit(ctx, *a.Ticket, []byte("1"))
	must(err == nil, "commit: %v", err)
	_, err = eng.Prepare(ctx, fence.Request{Intent: "scale-b", Tool: "scale", Args: []byte("2"), Domain: "pods", ReadSet: []fence.ReadSetEntry{{Domain: "pods", Seq: seq}}})
	must(code(err) == fence.CodeStale && errors.Is(err, fence.ErrStaleReadSet), "a decision on state that moved: %v", err)

	x, y := fence.VectorClock{}.Tick("a"), fence.VectorClock{}.Tick("b")
	must(x.Concurrent(y) && !x.Concurrent(x.Merge(y).Tick("a")), "vector clocks")
}
`

// TestReadmeLibraryClaims builds readmeLibraryProgram as a user's program (in a build overlay,
// as TestReadmeLibraryQuickStartRuns does) against a SQLite ledger, runs it across a restart
// and a kill -9, and checks that the README still says what it exercises, and that every code
// the README names after fence.CodeOf is one the engine returns.
func TestReadmeLibraryClaims(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(readme), "## Library quick start")
	sec, _, _ = strings.Cut(sec, "\n## ")
	if !ok {
		t.Fatal(`README.md has no "## Library quick start"`)
	}
	for _, said := range []string{"led, _ := store.Open(ctx, opts); eng := led.Engine (a durable ledger)", "errors.Is/As work",
		"eng.Release(ctx, *adm.Ticket,", "eng.Abort(ctx, *adm.Ticket,", "(fenced until cleared)",
		"`eng.PrepareWait(ctx, req, 30*time.Second)` waits for a concurrent duplicate to finish and\nreturns its cert",
		"`eng.Heartbeat` renews a long effect's\nlease", "Read sets (`Request.ReadSet`, from `eng.Current(ctx, domain)`) refuse decisions made on\nstate that moved",
		"(`Request.Clock`, `VectorClock.Concurrent`)"} {
		if !strings.Contains(sec, said) {
			t.Errorf("the README's library section no longer says %q; change this test with it", said)
		}
	}
	m := regexp.MustCompile(`fence\.CodeOf\(err\) is a stable code \(([^)]*)\)`).FindStringSubmatch(sec)
	if m == nil {
		t.Fatal("the README no longer lists fence.CodeOf's codes")
	}
	known := map[string]bool{fence.CodeInFlight: true, fence.CodePriorFailure: true, fence.CodeConflict: true, fence.CodeStale: true,
		fence.CodeDomainRace: true, fence.CodeLeaseLost: true, fence.CodeInvalid: true, fence.CodeStore: true}
	var named []string
	for _, c := range strings.Split(m[1], ",") {
		c = strings.TrimSpace(c)
		if c == "..." {
			continue
		}
		// the README's comment wraps inside the list
		c = strings.TrimSpace(strings.TrimPrefix(c, "//"))
		if !known[c] {
			t.Errorf("the README names code %q, which the engine does not return", c)
		}
		named = append(named, c)
	}

	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(readmeLibraryProgram), 0o600); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(root, "internal", "readmelibrary", "main.go"): src}})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "libprog")
	build := exec.Command("go", "build", "-overlay", ov, "-o", prog, "./internal/readmelibrary")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the program: %v\n%s", err, out)
	}
	runProg := func(ledger, mode string) string {
		t.Helper()
		out, err := exec.Command(prog, ledger, mode).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, out)
		}
		return strings.TrimSpace(string(out))
	}

	// A durable ledger: what one process committed, the next replays.
	durable := filepath.Join(dir, "ledger.db")
	if out := runProg(durable, "commit"); out != "committed" {
		t.Fatalf("commit: %s", out)
	}
	if out := runProg(durable, "replay"); out != "replayed" {
		t.Fatalf("after a restart: %s", out)
	}

	// A process killed while it holds a claim: its intent is fenced, not free.
	killed := filepath.Join(dir, "killed.db")
	hold := exec.Command(prog, killed, "hold")
	stdout, err := hold.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != "holding" {
			_ = hold.Process.Kill()
			t.Fatalf("hold: %q", s)
		}
	case <-time.After(60 * time.Second):
		_ = hold.Process.Kill()
		t.Fatal("the holder did not claim within 60 s")
	}
	if err := hold.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = hold.Wait()
	if out := runProg(killed, "orphaned"); out != "fenced" {
		t.Fatalf("after kill -9: %s", out)
	}

	out := runProg(filepath.Join(dir, "rest.db"), "rest")
	for _, c := range named {
		if c != fence.CodeDomainRace && !strings.Contains(out, c) { // a domain race needs two attempts in one instant
			t.Errorf("the program never met code %s the README names: %s", c, out)
		}
	}
}
