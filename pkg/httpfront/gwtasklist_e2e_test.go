package httpfront_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// openTasks initializes a session of a client that offers tasks and elicitation (MCP
// 2025-11-25) as the principal of h, and returns its id.
func (g *gw) openTasks(h hdr) string {
	g.t.Helper()
	r := g.mustPost("", h, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{},"elicitation":{}},"clientInfo":{"name":"httpfront-tasks","version":"1"}}}`)
	sid := r.header.Get("Mcp-Session-Id")
	if r.status != http.StatusOK || sid == "" {
		g.t.Fatalf("initialize: status %d, session %q, body %v", r.status, sid, r.raw)
	}
	if r := g.mustPost(sid, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r.status != http.StatusAccepted {
		g.t.Fatalf("initialized: status %d", r.status)
	}
	return sid
}

// taskList is one page of tasks/list.
type taskList struct {
	Tasks []struct {
		TaskID string `json:"taskId"`
		Status string `json:"status"`
	} `json:"tasks"`
	NextCursor *string `json:"nextCursor"`
}

func (g *gw) listTasks(sid string, h hdr, params string) taskList {
	g.t.Helper()
	r := g.mustPost(sid, h, `{"jsonrpc":"2.0","id":"list","method":"tasks/list","params":`+params+`}`)
	var l taskList
	if r.status != http.StatusOK || len(r.msgs) == 0 || json.Unmarshal(r.last(g.t)["result"], &l) != nil {
		g.t.Fatalf("tasks/list %s: %d %v", params, r.status, r.raw)
	}
	return l
}

// TestGatewayTasksListPages: through `wrap --listen` in front of server-everything (which lists
// its tasks 10 to a page, a cursor naming the next), a session with 11 tasks of the server and
// one of wrap's own (a task-augmented duplicate that follows another session's call in flight)
// lists wrap's task once, on the first page, and every server task once across the pages; the
// session of the call it follows lists none of it, and another session of the same principal
// cannot cancel its tasks.
func TestGatewayTasksListPages(t *testing.T) {
	t.Parallel()
	gateway, _ := followGateway(t, "", "--wait", "1s")
	g := &gw{t: t, url: gateway.url}
	ah := hdr{"Authorization": "Bearer " + followAlice}
	holder, lister := g.openTasks(ah), g.openTasks(ah)
	held := `{"name":"simulate-research-query","arguments":{"topic":"paged","ambiguous":true},"task":{"ttl":300000}}`
	r := g.mustPost(holder, ah, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":`+held+`}`)
	if !strings.Contains(strings.Join(r.raw, ""), `"taskId"`) {
		t.Fatalf("the first call: %d %v", r.status, r.raw)
	}
	var server []string
	for i := range 11 {
		r := g.mustPost(lister, ah, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"simulate-research-query","arguments":{"topic":"page %d"},"task":{"ttl":300000}}}`, 10+i, i))
		var h struct{ Task struct{ TaskID string } }
		if len(r.msgs) == 0 || json.Unmarshal(r.last(t)["result"], &h) != nil || h.Task.TaskID == "" || strings.HasPrefix(h.Task.TaskID, "effectfence-task-") {
			t.Fatalf("server task %d: %d %v", i, r.status, r.raw)
		}
		server = append(server, h.Task.TaskID)
	}
	r = g.mustPost(lister, ah, `{"jsonrpc":"2.0","id":30,"method":"tools/call","params":`+held+`}`)
	var dup struct {
		Task struct{ TaskID, Status string }
	}
	if len(r.msgs) == 0 || json.Unmarshal(r.last(t)["result"], &dup) != nil || !strings.HasPrefix(dup.Task.TaskID, "effectfence-task-") || dup.Task.Status != "working" {
		t.Fatalf("the duplicate: %d %v", r.status, r.raw)
	}
	seen := map[string]int{}
	first := g.listTasks(lister, ah, `{}`)
	if len(first.Tasks) == 0 || first.Tasks[0].TaskID != dup.Task.TaskID || first.Tasks[0].Status != "working" || first.NextCursor == nil {
		t.Fatalf("the first page: %+v", first)
	}
	pages := 1
	for l := first; ; pages++ {
		for _, k := range l.Tasks {
			seen[k.TaskID]++
		}
		if l.NextCursor == nil {
			break
		}
		c, _ := json.Marshal(map[string]string{"cursor": *l.NextCursor})
		l = g.listTasks(lister, ah, string(c))
		if pages > 10 {
			t.Fatalf("more than 10 pages: %+v", seen)
		}
	}
	for _, id := range append(slices.Clone(server), dup.Task.TaskID) {
		if seen[id] != 1 {
			t.Fatalf("task %s listed %d times across %d pages: %v", id, seen[id], pages, seen)
		}
	}
	if len(seen) != len(server)+1 {
		t.Fatalf("listed %v, want the 11 server tasks and wrap's", seen)
	}
	for _, k := range g.listTasks(holder, ah, `{}`).Tasks {
		if k.TaskID == dup.Task.TaskID {
			t.Fatalf("the holder's session lists the other session's task %s", k.TaskID)
		}
	}
	// Another session of the same principal cannot cancel the tasks of this one: wrap's
	// (not found: it did not hand it out), nor the server's (its own server never heard of it).
	other := g.openTasks(ah)
	for _, id := range []string{dup.Task.TaskID, server[0]} {
		r := g.mustPost(other, ah, `{"jsonrpc":"2.0","id":40,"method":"tasks/cancel","params":{"taskId":"`+id+`"}}`)
		if len(r.msgs) == 0 || r.last(t)["error"] == nil {
			t.Fatalf("another session's tasks/cancel of %s: %d %v", id, r.status, r.raw)
		}
	}
	r = g.mustPost(lister, ah, `{"jsonrpc":"2.0","id":41,"method":"tasks/get","params":{"taskId":"`+dup.Task.TaskID+`"}}`)
	if !strings.Contains(strings.Join(r.raw, ""), `"status":"working"`) {
		t.Fatalf("the following task after another session's tasks/cancel: %v", r.raw)
	}
}
