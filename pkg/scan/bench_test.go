package scan

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// genTree writes n source files under root in the languages the scanner reads, about one in
// ten declaring tools, the rest ordinary code of a few KB, in nested folders, and returns
// how many tools it declared.
func genTree(tb testing.TB, root string, n int) int {
	tb.Helper()
	type tmpl struct {
		ext, tool, code string
	}
	ts := tmpl{".ts",
		`server.tool("create_item_%[1]d", "Create item", { id: z.string() }, async ({ id }) => {
  const res = await fetch(base + "/items/%[1]d", { method: "POST", headers: { "Idempotency-Key": id } });
  return { content: [{ type: "text", text: await res.text() }] };
});
server.tool("list_items_%[1]d", "List items", {}, async () => ({ content: [] }));
`,
		`export function helper%[1]d(input: string[]): number {
  let total = 0;
  for (const item of input) {
    if (item.startsWith("x")) { total += item.length; } else { total -= 1; }
  }
  return total;
}
`}
	py := tmpl{".py",
		`@mcp.tool(name="send_message_%[1]d")
async def send_%[1]d(text: str) -> str:
    request_id = str(uuid.uuid4())
    r = await client.post(f"{BASE}/messages", json={"text": text}, headers={"X-Request-Id": request_id})
    return r.text


@mcp.tool()
async def get_message_%[1]d(mid: str) -> str:
    return (await client.get(f"{BASE}/messages/{mid}")).text
`,
		`def helper_%[1]d(values: list[int]) -> int:
    total = 0
    for v in values:
        if v %% 2 == 0:
            total += v
        else:
            total -= 1
    return total
`}
	goT := tmpl{".go",
		`func init() {
	s.AddTool(mcp.NewTool("delete_record_%[1]d"), deleteRecord%[1]d)
}

func deleteRecord%[1]d(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	_, err := db.ExecContext(ctx, "DELETE FROM records WHERE id = $1", req.GetString("id", ""))
	return mcp.NewToolResultText("ok"), err
}
`,
		`func helper%[1]d(values []int) int {
	total := 0
	for _, v := range values {
		if v%%2 == 0 {
			total += v
		}
	}
	return total
}
`}
	rs := tmpl{".rs",
		`    #[tool(description = "Update a row")]
    async fn update_row_%[1]d(&self) -> Result<CallToolResult, McpError> {
        let n = self.db.execute("UPDATE rows SET v = 1 WHERE id = 2").await;
        Ok(CallToolResult::success(vec![Content::text(n.to_string())]))
    }
`,
		`pub fn helper_%[1]d(values: &[i64]) -> i64 {
    values.iter().filter(|v| *v %% 2 == 0).sum()
}
`}
	java := tmpl{".java",
		`class Tools%[1]d {
    @Tool(description = "Cancel a booking")
    public String cancelBooking%[1]d(String id) {
        return http.send(HttpRequest.newBuilder(uri).method("DELETE", noBody()).build(), ofString()).body();
    }
}
`,
		`class Helper%[1]d {
    static int helper(int[] values) {
        int total = 0;
        for (int v : values) { if (v %% 2 == 0) { total += v; } }
        return total;
    }
}
`}
	rb := tmpl{".rb",
		`class ChargeCard%[1]dTool < MCP::Tool
  description "Charge a card"

  def self.call(amount:, server_context:)
    Stripe::Charge.create(amount: amount, currency: "usd")
  end
end
`,
		`def helper_%[1]d(values)
  values.select(&:even?).sum
end
`}
	all := []tmpl{ts, ts, ts, ts, py, py, goT, goT, rs, java, rb}
	tools := 0
	for i := range n {
		t := all[i%len(all)]
		dir := filepath.Join(root, fmt.Sprintf("pkg%02d", i%40), fmt.Sprintf("mod%02d", i/40%25))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			tb.Fatal(err)
		}
		var b strings.Builder
		for k := range 12 {
			fmt.Fprintf(&b, t.code, i*100+k)
		}
		if i%10 == 0 {
			fmt.Fprintf(&b, t.tool, i)
			switch t.ext {
			case ".ts", ".py":
				tools += 2
			default:
				tools++
			}
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d%s", i, t.ext)), []byte(b.String()), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return tools
}

// BenchmarkScan5000 scans a generated tree of 5,000 source files (about 5,000 lines of
// tool code among 100,000 lines of ordinary code). Target: under 2 s an op on 2 cores. It
// also reports cpu-s/op, the CPU time the scan used (both cores together), which stays
// meaningful when other work on the machine stretches the wall time.
func BenchmarkScan5000(b *testing.B) {
	root := b.TempDir()
	want := genTree(b, root, 5000)
	cpu0, cpuOK := processCPU()
	n := 0
	b.ResetTimer()
	for b.Loop() {
		n++
		rep, err := Scan(context.Background(), root, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if got := len(rep.Candidates) + len(rep.Others); got != want || rep.Files.Scanned != 5000 {
			b.Fatalf("found %d tools in %d files, want %d in 5000", got, rep.Files.Scanned, want)
		}
	}
	if cpu1, ok := processCPU(); ok && cpuOK && n > 0 {
		b.ReportMetric((cpu1-cpu0).Seconds()/float64(n), "cpu-s/op")
	}
}

// The generated tree is also a test: every declared tool is found, and each kind is
// classified as its name says.
func TestGeneratedTree(t *testing.T) {
	root := t.TempDir()
	want := genTree(t, root, 220)
	rep := scanDir(t, root, Options{})
	if got := len(rep.Candidates) + len(rep.Others); got != want {
		t.Fatalf("found %d tools, want %d", got, want)
	}
	for _, o := range rep.Others {
		if !strings.HasPrefix(o.Name, "list_items_") && !strings.HasPrefix(o.Name, "get_message_") {
			t.Errorf("%s is not a candidate: %s", o.Name, o.Reason)
		}
	}
}
