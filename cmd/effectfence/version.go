package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"

	"github.com/urfave/cli/v3"
)

// Set by the release build (-ldflags "-X main.version=... -X main.commit=...").
var (
	version = ""
	commit  = ""
)

// versionString reports the release version and commit, or what the Go toolchain recorded
// for a `go install` or source build.
func versionString() string {
	v, c := versionParts()
	return fmt.Sprintf("%s (commit %s)", v, c)
}

// versionParts is the release version and the commit, as versionString says them.
func versionParts() (v, c string) {
	v, c = version, commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && c == "" {
				c = s.Value
				if len(c) > 12 {
					c = c[:12]
				}
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	if c == "" {
		c = "unknown"
	}
	return v, c
}

func versionCommand(io streams) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version and commit",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: `print {"version":…,"commit":…}`}},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 0 {
				return usageErr("version takes no arguments, got %q", cmd.Args().First())
			}
			if cmd.Bool("json") {
				v, c := versionParts()
				b, _ := json.Marshal(map[string]string{"version": v, "commit": c})
				_, err := fmt.Fprintf(io.out, "%s\n", b)
				return err
			}
			_, err := fmt.Fprintln(io.out, "effectfence", versionString())
			return err
		},
	}
}
