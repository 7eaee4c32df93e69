package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestTurfwar(t *testing.T) {
	var out bytes.Buffer
	if err := turfwar(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"A  admitted", "B  refused (stale_read_set)", "C  escalated", `{"C":1} is concurrent with A's {"A":1}`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
