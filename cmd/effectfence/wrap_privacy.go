package main

import (
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/wrap"
	"github.com/urfave/cli/v3"
)

// privacyOptions reads --redact and --keep-result into opt.
func privacyOptions(cmd *cli.Command, opt *wrap.Options) error {
	opt.Redact, opt.KeepResult = map[string][]string{}, map[string]fence.KeepResult{}
	for _, s := range cmd.StringSlice("redact") {
		tool, path, err := wrap.ParseRedact(s)
		if err != nil {
			return usageErr("%v", err)
		}
		opt.Redact[tool] = append(opt.Redact[tool], path)
	}
	for _, s := range cmd.StringSlice("keep-result") {
		tool, keep, err := wrap.ParseKeepResult(s)
		if err != nil {
			return usageErr("%v", err)
		}
		if prev, dup := opt.KeepResult[tool]; dup && prev != keep {
			return usageErr("--keep-result for tool %q given twice with different values", tool)
		}
		opt.KeepResult[tool] = keep
	}
	return nil
}
