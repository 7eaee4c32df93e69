package main

import (
	"bytes"
	"strings"
	"testing"
)

const sample = `# load before ./pkg/fence: 1.00 2.00 3.00
goos: linux
pkg: github.com/effectfence/effectfence/pkg/fence
BenchmarkReplay-2   	 3000000	       380.0 ns/op	     512 B/op	       7 allocs/op
BenchmarkReplay-2   	 3000000	       420.0 ns/op	     512 B/op	       7 allocs/op
BenchmarkReplay-2   	 3000000	       400.0 ns/op	     512 B/op	       7 allocs/op
BenchmarkFreshCommit-2   	  200000	      3800 ns/op	    2900 B/op	      31 allocs/op
ok  	github.com/effectfence/effectfence/pkg/fence	3.1s
# load after ./pkg/fence: 1.50 2.00 3.00
# load before ./pkg/store/sqlite: 0.50 0.60 0.70
pkg: github.com/effectfence/effectfence/pkg/store/sqlite
BenchmarkAdmitCommit/body=1.1KB-2         	     200	   400000 ns/op	1127 body-bytes	100000 floor-ns	4.000 fsyncs/op	2.25 reads/op
BenchmarkAdmitCommitParallel16/body=1.1KB-2         	     200	   100000 ns/op	1127 body-bytes	100000 floor-ns	1.0 fsyncs/op
BenchmarkAdmitCommitResult/result=64KB-2         	     200	   500000 ns/op	66560 body-bytes	125000 floor-ns	4.000 fsyncs/op	2.25 reads/op
BenchmarkAdmitCommitResultParallel16/result=64KB-2         	     200	   250000 ns/op	66560 body-bytes	125000 floor-ns	2.0 fsyncs/op
# load after ./pkg/store/sqlite: 0.40 0.60 0.70
# load before ./pkg/store/postgres: 1.00 1.00 1.00
pkg: github.com/effectfence/effectfence/pkg/store/postgres
BenchmarkLedgerAdmitCommit/postgres/callers=1-2   	100	1200000 ns/op
BenchmarkLedgerAdmitCommit/postgres/callers=16-2   	100	300000 ns/op
BenchmarkServerFloor/commit-2   	100	400000 ns/op
BenchmarkServerFloor/fresh-2   	100	1000000 ns/op
BenchmarkServerFloor/fresh16-2   	100	200000 ns/op
# load after ./pkg/store/postgres: 1.00 1.00 1.00
`

func TestGoals(t *testing.T) {
	rs, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if v, load, ok := rs.get("pkg/fence:BenchmarkReplay", "ns/op"); !ok || v != 400 || load != "1.00 2.00 3.00 → 1.50 2.00 3.00" {
		t.Fatalf("replay: %v %q %v; want the median 400 and the package's loads", v, load, ok)
	}
	byGoal := map[string]row{}
	for _, r := range goals(rs) {
		byGoal[r.goal] = r
	}
	for goal, want := range map[string]row{
		"engine replay (memory store)":                            {figure: "0.40 µs", ratio: "2.11", met: "no"},
		"engine fresh admission + commit":                         {figure: "3.80 µs", ratio: "0.97", met: "yes"},
		"engine fresh admission + commit allocations":             {figure: "31 allocs", ratio: "3.10", met: "no"},
		"engine replay allocations":                               {figure: "7 allocs (one is the cert it answers with)", ratio: "n/a", met: "no"},
		"SQLite admission + commit, 1 caller, body 1.1KB":         {figure: "0.40 ms = 4.0 fsync floors (floor 100 µs; record 1.1 KB)", ratio: "1.00", met: "yes"},
		"SQLite 16 callers vs 1, body 1.1KB":                      {figure: "4.00x (0.10 ms/op at 16)", ratio: "1.33", met: "yes"},
		"SQLite admission + commit, 1 caller, result 64KB":        {figure: "0.50 ms = 4.0 fsync floors (floor 125 µs; record 65.0 KB)", ratio: "1.00", met: "yes"},
		"SQLite 16 callers vs 1, result 64KB":                     {figure: "2.00x (0.25 ms/op at 16)", ratio: "0.67", met: "no"},
		"SQLite admission + commit, 1 caller, result 4KB":         {figure: "not run (pkg/store/sqlite:BenchmarkAdmitCommitResult/result=4KB)"},
		"SQLite admission + commit, 1 caller, body 4KB":           {figure: "not run (pkg/store/sqlite:BenchmarkAdmitCommit/body=4KB)"},
		"PostgreSQL admission + commit vs bare pgx, 1 caller(s)":  {figure: "1.20x (1.20 ms vs 1.00 ms for bare pgx's two durable commits; 3.00x one bare INSERT)", ratio: "0.80", met: "yes"},
		"PostgreSQL admission + commit vs bare pgx, 16 caller(s)": {figure: "1.50x (0.30 ms vs 0.20 ms for bare pgx's two durable commits)", ratio: "1.00", met: "yes"},
		"PostgreSQL 16-caller scaling":                            {figure: "4.00x (bare pgx 5.00x)", ratio: "0.80", met: "no"},
	} {
		got := byGoal[goal]
		if got.figure != want.figure || got.ratio != want.ratio || got.met != want.met {
			t.Errorf("%s: %+v; want %+v", goal, got, want)
		}
	}
	var out bytes.Buffer
	report(&out, rs)
	if !strings.Contains(out.String(), "0.50 0.60 0.70 → 0.40 0.60 0.70") {
		t.Errorf("the report does not show the load of the SQLite run:\n%s", out.String())
	}
}
