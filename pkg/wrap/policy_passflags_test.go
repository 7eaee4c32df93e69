package wrap_test

import (
	"strings"
	"testing"
)

// A tool passed through unfenced (--pass, or fence: false in the file) has no identity, no
// ledger record and no replay: a per-tool flag given for it (--key, --keep-result,
// --replay-window TOOL=DUR, ...) has no effect. (--redact has one: the tool's values are kept
// out of the server's stderr that wrap records, TestRedactedValueOfAnEarlierCallNotInReasons.) The file refuses settings beside fence: false;
// wrap refuses the flags likewise at its start instead of ignoring them.
func TestSettingsOfAPassedToolAreRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, policy string
		flags        []string
		want         string
	}{
		{"--pass and --key", "", []string{"--pass", "charge_card", "--key", "charge_card:order"}, "--key"},
		{"the file's pass and --replay-window", "version: 1\ntools:\n  \"charge_*\":\n    fence: false\n", []string{"--replay-window", "charge_card=1h"}, "--replay-window"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := demoRig(t, "1ms")
			flags := c.flags
			if c.policy != "" {
				flags = append([]string{"--policy", writePolicy(t, r, c.policy)}, flags...)
			}
			_, err := r.tryWrap(flags...)
			if err == nil || !strings.Contains(err.Error(), `tool "charge_card" passes through unfenced`) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("wrap %v: %v; want it refused, naming %s", c.flags, err, c.want)
			}
		})
	}
}
