// Command turfwar: three SRE agents act on one deployment at once, through the real fence API.
//
//   - Agent A reads the deployment (seq 0), decides to scale it to 12 replicas, and is admitted
//     and certified.
//   - Agent B read the deployment at the same moment as A (seq 0) and decides to roll it back;
//     by the time it asks, A's change moved the domain: refused with a stale read set.
//   - Agent C reads the deployment after A's change (seq 1), so its read set is current, but its
//     vector clock shows it never saw A's decision: the two decisions are concurrent. The fence
//     admits it (nothing it read moved), C compares clocks with A's cert, releases its claim
//     (the effect definitely did not happen) and escalates to a human.
//
// It exits non-zero if any of the three does not end as described.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/effectfence/effectfence/pkg/fence"
)

const domain = "deploy:checkout"

func main() {
	if err := turfwar(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "turfwar: FAILED:", err)
		os.Exit(1)
	}
}

func turfwar(ctx context.Context, out io.Writer) error {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	say := func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...) }

	// A and B both read the deployment now.
	seen, err := eng.Current(ctx, domain)
	if err != nil {
		return err
	}
	say("deployment %s is at seq %d; agents A and B both read it", domain, seen)

	// A: scale to 12.
	admA, err := eng.Prepare(ctx, fence.Request{
		Intent: "scale:checkout:12", Tool: "kubectl_scale", Args: []byte(`{"deployment":"checkout","replicas":12}`),
		Domain: domain, ReadSet: []fence.ReadSetEntry{{Domain: domain, Seq: seen}}, Agent: "A",
	})
	if err != nil || !admA.Fresh() {
		return fmt.Errorf("agent A should be admitted: %v", err)
	}
	certA, err := eng.Commit(ctx, *admA.Ticket, []byte(`{"scaled":"checkout","replicas":12}`))
	if err != nil {
		return fmt.Errorf("commit of agent A: %v", err)
	}
	say("A  admitted: kubectl scale checkout --replicas=12 ran; cert %s… seq %d clock %s", certA.Hash[:12], certA.Seq, certA.Clock.Canonical())

	// B: roll back, decided on the same read as A.
	_, err = eng.Prepare(ctx, fence.Request{
		Intent: "rollback:checkout:v41", Tool: "kubectl_rollout_undo", Args: []byte(`{"deployment":"checkout","to":"v41"}`),
		Domain: domain, ReadSet: []fence.ReadSetEntry{{Domain: domain, Seq: seen}}, Agent: "B",
	})
	var stale fence.StaleReadSetError
	if !errors.As(err, &stale) {
		return fmt.Errorf("agent B should be refused with stale_read_set, got %v", err)
	}
	say("B  refused (%s): %s is at %d, B decided on %d; nothing ran, B must re-read", stale.Code(), stale.Domain, stale.Actual, stale.Expected)

	// C: reads after A, but decided from its own knowledge only.
	now, err := eng.Current(ctx, domain)
	if err != nil {
		return err
	}
	admC, err := eng.Prepare(ctx, fence.Request{
		Intent: "scale:checkout:3", Tool: "kubectl_scale", Args: []byte(`{"deployment":"checkout","replicas":3}`),
		Domain: domain, ReadSet: []fence.ReadSetEntry{{Domain: domain, Seq: now}}, Agent: "C",
	})
	if err != nil || !admC.Fresh() {
		return fmt.Errorf("agent C's read set is current and should be admitted: %v", err)
	}
	latest, err := eng.Status(ctx, "scale:checkout:12")
	if err != nil || latest.Cert == nil {
		return fmt.Errorf("cert of agent A: %v", err)
	}
	mine, err := eng.Status(ctx, "scale:checkout:3") // C's claim, with the clock the fence recorded
	if err != nil {
		return err
	}
	clockC := mine.Clock
	if !clockC.Concurrent(latest.Cert.Clock) {
		return fmt.Errorf("clock of agent C %s should be concurrent with A's %s", clockC.Canonical(), latest.Cert.Clock.Canonical())
	}
	if err := eng.Release(ctx, *admC.Ticket, "decision concurrent with A's scale-up; escalated to a human"); err != nil {
		return err
	}
	say("C  escalated: its clock %s is concurrent with A's %s — it decided without seeing A's change;", clockC.Canonical(), latest.Cert.Clock.Canonical())
	say("   claim released (nothing ran), paging the on-call human instead of fighting A")

	st, err := eng.Stats(ctx)
	if err != nil {
		return err
	}
	say("%s", st.Line())
	if st.SinceBoot.Admitted != 2 || st.SinceBoot.Stale != 1 {
		return fmt.Errorf("counters %+v", st.SinceBoot)
	}
	return nil
}
