package wrap_test

import (
	"strings"
	"testing"
	"time"
)

// A done record lives for the ledger's result TTL (24 h by default), whatever the replay
// window: a replay_window: 7d (as the payments example has) under the default TTL answers
// identical calls for a day only, and then the call runs again. Wrap says so at its start for
// each window longer than the TTL, from the file, from flags or the default, naming the setting
// to raise.
// Shown first for real: a 1h window under a 2 s TTL, an identical call 3 s later runs again.
func TestReplayWindowLongerThanResultTTLIsNamed(t *testing.T) {
	t.Parallel()
	r := demoRig(t, "1ms")
	r.extraEnv = []string{"EFFECTFENCE_RESULT_TTL_SECS=2"}
	w := r.wrap("--policy", writePolicy(t, r, "version: 1\ntools:\n  charge_card:\n    replay_window: 1h\n"))
	call(t, w.Session, "charge_card", `{"amount":1}`)
	time.Sleep(3 * time.Second)
	call(t, w.Session, "charge_card", `{"amount":1}`)
	ran := r.effectsOf("charge_card")
	w.Close()

	r2 := demoRig(t, "1ms")
	r2.extraEnv = []string{"EFFECTFENCE_RESULT_TTL_SECS=3600"}
	path := writePolicy(t, r2, "version: 1\ndefaults:\n  replay_window: 1d\ntools:\n  charge_card:\n    replay_window: 2h\n  \"book_*\":\n    replay_window: 30m\n")
	t.Logf("with a 2 s TTL and a 1h window, an identical charge 3 s later: %d executions", ran)
	w2 := r2.wrap("--policy", path, "--replay-window", "record_event=90m")
	wants := []string{
		`replay window 1d of every tool (the policy's defaults) is longer than the result TTL (1h0m0s)`,
		`replay window 2h0m0s of tool "charge_card" (the policy) is longer than the result TTL (1h0m0s)`,
		`replay window 1h30m0s of tool "record_event" (--replay-window) is longer than the result TTL (1h0m0s)`,
	}
	waitFor(t, "wrap to name the windows the result TTL cuts short", func() bool {
		for _, want := range wants {
			if !strings.Contains(w2.log.String(), want) {
				return false
			}
		}
		return true
	})
	log := w2.log.String()
	if strings.Contains(log, `"book_*"`) {
		t.Errorf("a window within the TTL is named:\n%s", log)
	}
	// The default window (10 minutes) under a TTL of a minute, no window set anywhere.
	r3 := demoRig(t, "1ms")
	r3.extraEnv = []string{"EFFECTFENCE_RESULT_TTL_SECS=60"}
	w3 := r3.wrap()
	waitFor(t, "wrap to name the default window the result TTL cuts short", func() bool {
		return strings.Contains(w3.log.String(), `replay window 10m0s of every tool (the default) is longer than the result TTL (1m0s)`)
	})
}
