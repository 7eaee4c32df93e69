package serve

import "testing"

// answered reads the members mcp-go reads as encoding/json does, whatever their case.
func TestAnsweredReadsMembersAsMCPGoDoes(t *testing.T) {
	for line, want := range map[string]bool{
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`:                    true,
		`{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}`:        false,
		`{"jsonrpc":"2.0","id":1,"method":"ping","Result":{}}`:        false,
		`{"jsonrpc":"2.0","id":1,"method":"ping","reſult":{}}`:        false,
		`{"jsonrpc":"2.0","id":1,"method":"ping","re\u017Fult":{}}`:   false,
		`{"jsonrpc":2,"id":1,"method":"ping"}`:                        false,
		`{"JSONRPC":2,"id":1,"method":"ping"}`:                        false,
		`{"jsonrpc":"2.0","id":1,"method":5}`:                         false,
		`{"jsonrpc":"2.0","id":1,"Method":5,"method":"ping"}`:         false,
		`{"jsonrpc":"2.0","id":1,"ID":2,"method":"ping"}`:             false,
		`{"jsonrpc":"2.0","id":1,"ıd":2,"method":"ping"}`:             true, // ı does not fold to i
		`{"jsonrpc":"2.0","id":1,"\u0049D":2,"method":"ping"}`:        false,
		`{"jsonrpc":"2.0","id":1}`:                                    false,
		`{"jsonrpc":"2.0","id":1,"METHOD":"ping"}`:                    true,
		`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"id":2}}`:  true,
		`{"jsonrpc":"2.0","id":1,"method":"ping","idx":2,"résult":1}`: true,
	} {
		if _, got := answered([]byte(line)); got != want {
			t.Errorf("answered(%s) = %v; want %v", line, got, want)
		}
	}
}
