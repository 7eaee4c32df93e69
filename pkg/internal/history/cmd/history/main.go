//go:build linux

// Command history runs the randomized, fault-injecting history checker of `effectfence wrap`
// (package history) and prints what it did and every violation it found. Run it through
// scripts/history:
//
//	scripts/history [-seed N] [-duration D] [-ledger sqlite|postgres|both] [-crash-db] [-containers] [-fulldisk]
//
// PostgreSQL runs need EFFECTFENCE_TEST_POSTGRES, or -crash-db: a private cluster of the run's
// own (pkg/internal/pgcluster) that the nemesis also kills and restarts. -containers runs every
// other wrap in a PID namespace of its own (root and unshare; else exit 2). -fulldisk puts the
// SQLite ledger on a small tmpfs the nemesis fills and frees (root; else exit 2), unmounted at
// the end of each run (in a mount namespace of the command's own: a SIGKILL leaves nothing
// mounted), and on SIGINT, SIGTERM or SIGHUP, which end the run early (its history
// still checked, the runs after it not made). Exit status: 0 no violation, 1 violations, 2 the
// run could not be made or was interrupted.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/history"
)

func main() {
	history.MaybeServeChild()
	os.Exit(run())
}

func run() int {
	seed := flag.Int64("seed", 1, "seed of the ops and faults")
	duration := flag.Duration("duration", 20*time.Second, "how long clients call and the nemesis injects faults, per ledger")
	ledger := flag.String("ledger", "sqlite", "sqlite, postgres (needs EFFECTFENCE_TEST_POSTGRES) or both")
	bin := flag.String("bin", "", "effectfence binary (default: build ./cmd/effectfence)")
	dir := flag.String("dir", "", "where to keep the ledgers, effects files, wrap logs and history.json (default: a new temporary directory)")
	wraps := flag.Int("wraps", 3, "wrap processes sharing the ledger")
	clients := flag.Int("clients", 4, "concurrent calls per wrap")
	lease := flag.Duration("lease", 2*time.Second, "the wraps' lease")
	front := flag.String("front", "stdio", "how clients reach the wraps: stdio, http (each wrap is `wrap --listen`) or both")
	pad := flag.Int("pad", 0, "bytes of padding in every call's arguments (e.g. 12000: large records)")
	pooler := flag.String("pooler", "", "PostgreSQL: a pooler's URL the wraps use instead of the server's (its role must reach -schema by its own search_path)")
	schema := flag.String("schema", "", "PostgreSQL: the run's schema (default history_<seed>_<pid>_<front>); it is dropped at the end")
	crashDB := flag.Bool("crash-db", false, "PostgreSQL: the ledger on a private cluster (PostgreSQL's server binaries, run as the user postgres under root) that the nemesis also kill -9s and restarts into crash recovery (fault crash-db), instead of EFFECTFENCE_TEST_POSTGRES")
	fullDisk := flag.Bool("fulldisk", false, "SQLite: the ledger and its spool on a tmpfs of -disk-size bytes the harness mounts (root), which the nemesis fills and frees a random time later (fault full-disk); with -ledger both, the PostgreSQL runs go without it")
	diskSize := flag.Int("disk-size", history.DefaultDiskSize, "with -fulldisk, the size of the ledger's tmpfs in bytes")
	containers := flag.Bool("containers", false, "run every other wrap slot (0, 2, …) in containers on this host: each wrap in a PID namespace of its own below the harness's (unshare --pid --fork --mount-proc; needs root)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "history: unexpected argument %q\n", flag.Arg(0))
		return 2
	}
	if *crashDB && *ledger == "sqlite" {
		fmt.Fprintln(os.Stderr, "history: -crash-db crashes a PostgreSQL server: it needs -ledger postgres or both")
		return 2
	}
	if *fullDisk && *ledger == "postgres" {
		fmt.Fprintln(os.Stderr, "history: -fulldisk fills a SQLite ledger's disk: it needs -ledger sqlite or both")
		return 2
	}
	if *crashDB && *pooler != "" {
		fmt.Fprintln(os.Stderr, "history: -crash-db runs a private server of its own and takes no -pooler")
		return 2
	}
	if *fullDisk {
		ownMountNamespace()
	}
	ledgers := []string{*ledger}
	if *ledger == "both" {
		ledgers = []string{"sqlite", "postgres"}
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "effectfence-history-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "history:", err)
			return 2
		}
		*dir = d
	}
	if *bin == "" {
		*bin = filepath.Join(*dir, "effectfence")
		build := exec.Command("go", "build", "-o", *bin, "github.com/effectfence/effectfence/cmd/effectfence")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "history: building effectfence:", err)
			return 2
		}
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "history:", err)
		return 2
	}
	fronts := []string{*front}
	if *front == "both" {
		fronts = []string{"stdio", "http"}
	}
	type runOf struct{ ledger, front string }
	var runs []runOf
	for _, l := range ledgers {
		for _, f := range fronts {
			runs = append(runs, runOf{l, f})
		}
	}
	// A signal ends the run early, as its duration would: the wraps are stopped, and the
	// ledger's tmpfs of a -fulldisk run is unmounted. A second signal kills at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := 0
	for _, ro := range runs {
		if ctx.Err() != nil {
			break
		}
		l := ro.ledger
		d := filepath.Join(*dir, l)
		if len(fronts) > 1 || ro.front != "stdio" {
			d = filepath.Join(*dir, l+"-"+ro.front)
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			fmt.Fprintln(os.Stderr, "history:", err)
			return 2
		}
		rep, err := history.Run(ctx, history.Config{
			Seed: *seed, Duration: *duration, Ledger: l, Postgres: os.Getenv("EFFECTFENCE_TEST_POSTGRES"),
			Bin: *bin, Child: []string{self}, Dir: d, Wraps: *wraps, Clients: *clients, Lease: *lease, Log: os.Stderr, Front: ro.front, Pad: *pad,
			Pooler: *pooler, Schema: *schema, CrashDB: *crashDB && l == "postgres", Containers: *containers,
			FullDisk: *fullDisk && l == "sqlite", DiskSize: *diskSize,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Print(rep.Summary())
		fmt.Printf("recorded: %s\n", filepath.Join(d, "history.json"))
		if len(rep.Violations) > 0 {
			code = 1
		}
	}
	if ctx.Err() != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "history: interrupted: the run was cut short (what it recorded was checked)")
		return 2
	}
	return code
}

// privateMounts marks a history command that runs in a mount namespace of its own.
const privateMounts = "EFFECTFENCE_HISTORY_PRIVATE_MOUNTS"

// ownMountNamespace runs this command again, with the same arguments and the same process id,
// in a mount namespace of its own whose mounts do not propagate to the host's (unshare
// --mount --propagation private), so the ledger's tmpfs of a -fulldisk run is seen by this
// command, its wraps and their children only, and goes with the last of them: a harness killed
// with SIGKILL, which unmounts nothing, leaves no mount behind on the host. Where unshare is
// missing or fails, the run goes on in the host's namespace, as before, with a warning.
func ownMountNamespace() {
	if os.Getenv(privateMounts) != "" || os.Geteuid() != 0 {
		return // not root: the mount itself fails, and says so
	}
	unshare, err := exec.LookPath("unshare")
	if err == nil {
		var self string
		if self, err = os.Executable(); err == nil {
			args := append([]string{"unshare", "--mount", "--propagation", "private", "--", self}, os.Args[1:]...)
			err = syscall.Exec(unshare, args, append(os.Environ(), privateMounts+"=1"))
		}
	}
	fmt.Fprintf(os.Stderr, "history: the ledger's tmpfs is mounted in the host's mount namespace (a kill -9 of this command would leave it mounted): no namespace of its own: %v\n", err)
}
