package httpback

import "testing"

// TestReplayedNoteIsByIDAndData: a notification event is taken for one delivered before only
// on a resumed stream, and only with the same id and the same data: a server that numbers each
// stream's events on its own loses none of them.
func TestReplayedNoteIsByIDAndData(t *testing.T) {
	t.Parallel()
	var s Session
	a := sseEvent{id: "1", hasID: true, data: []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"a"}}`)}
	b := sseEvent{id: "1", hasID: true, data: []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"b"}}`)}
	if s.replayedNote(a, false) {
		t.Fatal("the first event was taken for a replay")
	}
	if s.replayedNote(a, false) {
		t.Fatal("the same event again on a stream that was not resumed was taken for a replay")
	}
	if !s.replayedNote(a, true) {
		t.Fatal("the same event on a resumed stream was not taken for a replay")
	}
	if s.replayedNote(b, true) {
		t.Fatal("another event under the same id was taken for a replay")
	}
	if s.replayedNote(sseEvent{data: a.data}, true) {
		t.Fatal("an event without an id was taken for a replay")
	}
}
