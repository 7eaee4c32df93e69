package fence_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// The effect runs once; every later attempt of the intent gets its recorded result.
func ExampleEngine_Prepare() {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	defer eng.Close()
	charges := 0
	charge := func() []byte { charges++; return []byte(`{"charge":"ch_1"}`) }
	req := fence.Request{Intent: "charge:order-123", Tool: "charge_card", Args: []byte(`{"amount":4900}`), Agent: "billing-agent"}
	for attempt := 1; attempt <= 3; attempt++ {
		adm, err := eng.Prepare(ctx, req)
		switch {
		case err != nil:
			fmt.Println("refused:", fence.CodeOf(err)) // do NOT run the effect
		case adm.Cert != nil:
			fmt.Printf("attempt %d: replayed %s\n", attempt, adm.Cert.Result)
		default:
			cert, err := eng.Commit(ctx, *adm.Ticket, charge())
			fmt.Printf("attempt %d: ran; commit: %v; cert verifies: %v\n", attempt, err, cert.Verify() == nil)
		}
	}
	// The same intent with other arguments is another action: refused, never replayed.
	_, err := eng.Prepare(ctx, fence.Request{Intent: "charge:order-123", Tool: "charge_card", Args: []byte(`{"amount":9900}`)})
	fmt.Println("other arguments:", fence.CodeOf(err))
	fmt.Println("charges:", charges)
	// Output:
	// attempt 1: ran; commit: <nil>; cert verifies: true
	// attempt 2: replayed {"charge":"ch_1"}
	// attempt 3: replayed {"charge":"ch_1"}
	// other arguments: intent_conflict
	// charges: 1
}

// An effect whose outcome its holder cannot tell is fenced: nothing runs it again until an
// operator, having checked the real system, clears it. One that definitely did not happen is
// released, and the next attempt runs.
func ExampleEngine_Abort() {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	defer eng.Close()
	req := fence.Request{Intent: "refund:7", Tool: "refund", Args: []byte(`{"usd":70}`)}
	adm, _ := eng.Prepare(ctx, req)
	fmt.Println("abort:", eng.Abort(ctx, *adm.Ticket, "the processor timed out"))
	_, err := eng.Prepare(ctx, req)
	fmt.Println("next attempt:", fence.CodeOf(err))
	_, err = eng.Clear(ctx, "refund:7", "ops", "the processor shows no refund")
	fmt.Println("clear:", err)
	adm, err = eng.Prepare(ctx, req)
	fmt.Println("after the clear, runs:", err == nil && adm.Fresh())
	fmt.Println("release:", eng.Release(ctx, *adm.Ticket, "declined before calling the processor"))
	adm, err = eng.Prepare(ctx, req)
	fmt.Println("after the release, runs:", err == nil && adm.Fresh())
	// Output:
	// abort: <nil>
	// next attempt: prior_failure
	// clear: <nil>
	// after the clear, runs: true
	// release: <nil>
	// after the release, runs: true
}

// A duplicate that comes while the first attempt runs waits for it and gets its result.
func ExampleEngine_PrepareWait() {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	defer eng.Close()
	req := fence.Request{Intent: "email:welcome:42", Tool: "send_email", Args: []byte(`{"to":"u42"}`)}
	first, _ := eng.Prepare(ctx, req)
	var wg sync.WaitGroup
	var dup fence.Admission
	var dupErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		dup, dupErr = eng.PrepareWait(ctx, req, 30*time.Second)
	}()
	_, err := eng.Commit(ctx, *first.Ticket, []byte(`{"message_id":"m-1"}`))
	wg.Wait()
	fmt.Println("first: ran;", err)
	fmt.Printf("duplicate: %v, result %s\n", dupErr, dup.Cert.Result)
	// Output:
	// first: ran; <nil>
	// duplicate: <nil>, result {"message_id":"m-1"}
}
