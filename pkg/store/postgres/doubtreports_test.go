package postgres

import "testing"

// TestReportClosedWithoutOpeningDoesNotPanic: a commit whose answer was lost and that carried
// no counters keeps no doubt, and its reports are closed as "nothing can tell" without ever
// having been opened. In a store that had opened no doubt before, the count of open reports
// was a nil map, and closing decremented an entry of it: "assignment to entry in nil map", a
// panic in the holder's Commit or Settle (a full CI run's serve test whose ledger another
// process held locked: the settle lane panicked and the outcome waited in the spool). It
// now closes them, and the store says the earlier attempt may have landed.
func TestReportClosedWithoutOpeningDoesNotPanic(t *testing.T) {
	var d doubts
	r := report{intent: "charge:1", token: 7, nonce: "n"}
	d.closed([]report{r}, -1)
	if landed, maybe := d.earlier(r); landed || !maybe {
		t.Fatalf("a report closed as nothing-can-tell: landed %v, maybe %v; want maybe", landed, maybe)
	}
	// Opened twice and closed once, it is still open; closed again, it is not.
	o := report{intent: "charge:2", token: 1, nonce: "m"}
	d.opened([]report{o, o})
	d.closed([]report{o}, 0)
	if _, maybe := d.earlier(o); !maybe {
		t.Fatal("a report opened twice and closed once is no longer open")
	}
	d.closed([]report{o}, 0)
	if landed, maybe := d.earlier(o); landed || maybe {
		t.Fatalf("a report closed as not landed: landed %v, maybe %v; want neither", landed, maybe)
	}
}
