package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// The demo server's tools.
const (
	// ToolCharge charges a pretend card: every execution is a new charge with a new id.
	ToolCharge = "charge_card"
	// ToolRecord records an event and always answers the same text, so its responses cannot
	// show how often it ran; only its effects file can.
	ToolRecord = "record_event"
	// ToolBook books a seat once; later bookings of the same seat are refused with a tool
	// error, so the server guards itself against duplicates.
	ToolBook = "book_seat"
)

// ServerOptions configure the raw demo server.
type ServerOptions struct {
	// Effects is the path of the server's own effects file: one line is appended per
	// execution of a tool that has an effect. It is created if missing. Empty means no file
	// (effects are then counted only in memory).
	Effects string
	// Latency is how long each effect takes, like a payment API would. It widens the window in
	// which identical calls overlap; the effect happens whatever its value.
	Latency time.Duration
	// Log receives the server's own diagnostics (never stdout: stdout carries the protocol).
	Log io.Writer
}

// raw is the unfenced demo server: it does exactly what each call asks, as many times as it is
// asked, and writes down every execution.
type raw struct {
	opts ServerOptions

	mu      sync.Mutex
	count   int             // executions with an effect, across all tools
	charges int             // charge_card executions; the charge id is derived from it
	booked  map[string]bool // seats booked by book_seat
	file    *os.File        // the effects file, or nil
}

// NewServer builds the raw demo MCP server. The returned close function closes the effects
// file.
func NewServer(opts ServerOptions) (*server.MCPServer, func() error, error) {
	r := &raw{opts: opts, booked: map[string]bool{}}
	if opts.Effects != "" {
		f, err := os.OpenFile(opts.Effects, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("demo server: open effects file: %w", err)
		}
		r.file = f
	}
	s := server.NewMCPServer("effectfence-demo", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool(ToolCharge,
		mcp.WithDescription("Charge the demo card (nothing real is charged). Every call is a new charge with a new charge id."),
		mcp.WithNumber("amount", mcp.Required(), mcp.Description("amount in cents, > 0")),
		mcp.WithIdempotentHintAnnotation(false),
		mcp.WithDestructiveHintAnnotation(true),
	), r.charge)
	s.AddTool(mcp.NewTool(ToolRecord,
		mcp.WithDescription("Record an event in the demo ledger. Always answers \"recorded\"."),
		mcp.WithString("name", mcp.Required(), mcp.Description("event name")),
	), r.record)
	s.AddTool(mcp.NewTool(ToolBook,
		mcp.WithDescription("Book a seat. A seat that is already booked is refused with a tool error."),
		mcp.WithString("seat", mcp.Required(), mcp.Description("seat label, e.g. 12A")),
	), r.book)
	closeFn := func() error {
		if r.file == nil {
			return nil
		}
		return r.file.Close()
	}
	return s, closeFn, nil
}

// Serve runs the raw demo server over in/out until in closes or ctx is cancelled.
func Serve(ctx context.Context, in io.Reader, out io.Writer, opts ServerOptions) error {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	s, closeFn, err := NewServer(opts)
	if err != nil {
		return err
	}
	defer closeFn()
	logger := log.New(opts.Log, "effectfence demo-server: ", 0)
	// The SDK runs tools/call on a pool of 5 workers by default, which would serialise a
	// race of twelve; size it so that every concurrent call really runs concurrently.
	stdio := server.NewStdioServer(s)
	for _, o := range []server.StdioOption{
		server.WithErrorLogger(logger),
		server.WithWorkerPoolSize(100),
		server.WithQueueSize(10000),
	} {
		o(stdio)
	}
	err = stdio.Listen(ctx, in, out)
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// effect performs one execution: it takes Latency, then is written down. No lock is held while
// the effect "runs", so concurrent calls overlap as they would against a real API, and the
// sleep ignores the caller's cancellation: a client that hangs up mid-charge does not un-charge.
// line builds the effects-file line from the charge number (meaningful only when isCharge).
func (r *raw) effect(isCharge bool, line func(charge int) string) (charge int, err error) {
	time.Sleep(r.opts.Latency)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count++
	if isCharge {
		r.charges++
	}
	if r.file != nil {
		if _, err := io.WriteString(r.file, line(r.charges)+"\n"); err != nil {
			return 0, fmt.Errorf("write effects file: %w", err)
		}
	}
	return r.charges, nil
}

func (r *raw) charge(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	amount, err := req.RequireFloat("amount")
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	if amount <= 0 || amount != float64(int64(amount)) {
		return mcp.NewToolResultErrorf("amount must be a positive whole number of cents, got %v", amount), nil
	}
	cents := int64(amount)
	n, err := r.effect(true, func(charge int) string {
		return fmt.Sprintf("%s %s %d", ToolCharge, ChargeID(charge), cents)
	})
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	id := ChargeID(n)
	return mcp.NewToolResultStructured(
		map[string]any{"charge_id": id, "amount": cents, "status": "succeeded"},
		fmt.Sprintf("charged $%d.%02d: %s", cents/100, cents%100, id),
	), nil
}

func (r *raw) record(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := req.RequireString("name")
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	if _, err := r.effect(false, func(int) string { return fmt.Sprintf("%s %q", ToolRecord, name) }); err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	return mcp.NewToolResultText("recorded"), nil
}

func (r *raw) book(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	seat, err := req.RequireString("seat")
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	// The check and the booking are one step under the lock: this tool guards itself.
	r.mu.Lock()
	if r.booked[seat] {
		r.mu.Unlock()
		return mcp.NewToolResultErrorf("seat %s is already booked", seat), nil
	}
	r.booked[seat] = true
	r.count++
	var werr error
	if r.file != nil {
		_, werr = fmt.Fprintf(r.file, "%s %q\n", ToolBook, seat)
	}
	r.mu.Unlock()
	if werr != nil {
		return mcp.NewToolResultError("write effects file: " + werr.Error()), nil
	}
	return mcp.NewToolResultText("booked seat " + seat), nil
}

// ChargeID is the id of the n-th charge a demo server process makes. It depends only on n, so
// repeated demos print the same ids.
func ChargeID(n int) string { return fmt.Sprintf("ch_demo_%04d", n) }

// CountEffects returns the number of executions written to an effects file: its number of
// lines. A missing file is an error, not zero, so a mistyped path cannot pass for "no effects".
func CountEffects(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("count effects: %w", err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		n++
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("count effects in %s: %w", path, err)
	}
	return n, nil
}
