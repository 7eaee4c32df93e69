package wrap_test

import (
	"strings"
	"testing"
)

// A key field that is also ignored (or lies under an ignored field) is cut from the arguments
// before the key is read: every call of the tool then has the key {"order": null}, and two
// charges for different orders with the same amount are one call, the second answered with
// the first's receipt and never run. Wrap refuses such settings at its start, whether they
// come from one entry, from the entry and defaults, from flags, or from a flag and the file.
func TestKeyFieldThatIsIgnoredIsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, policy string
		flags        []string
	}{
		{"one entry", "version: 1\ntools:\n  charge_card:\n    key: [order]\n    ignore: [order]\n", nil},
		{"a parent ignored", "version: 1\ntools:\n  charge_card:\n    key: [order.id]\n    ignore: [order]\n", nil},
		{"defaults' ignore", "version: 1\ndefaults:\n  ignore: [order]\ntools:\n  \"charge_*\":\n    key: [order]\n", nil},
		{"flags", "", []string{"--key", "charge_card:order", "--ignore-field", "charge_card:order"}},
		{"a flag over the file", "version: 1\ntools:\n  charge_card:\n    key: [order]\n", []string{"--ignore-field", "charge_card:order"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := demoRig(t, "1ms")
			flags := c.flags
			if c.policy != "" {
				flags = append([]string{"--policy", writePolicy(t, r, c.policy)}, flags...)
			}
			w, err := r.tryWrap(flags...)
			if err == nil {
				// Show what the settings do: a second order is swallowed.
				call(t, w.Session, "charge_card", `{"amount":500,"order":{"id":"A-1"}}`)
				x := call(t, w.Session, "charge_card", `{"amount":500,"order":{"id":"A-2"}}`)
				t.Fatalf("wrap started; a charge for another order was replayed %v (%d executions)", x.replayed(), r.effectsOf("charge_card"))
			}
			if !strings.Contains(err.Error(), "is ignored") || !strings.Contains(err.Error(), "order") {
				t.Fatalf("wrap's refusal does not name the ignored key field: %v", err)
			}
		})
	}
}
