package sqlite

// SetTestHookMigrated sets a function that runs after each migration step, before its
// transaction commits (nil removes it). Only tests use it: the crash tests stop there.
func SetTestHookMigrated(f func(from int)) { testHookMigrated = f }

// SetTestHookDecoded sets a function told of every record body the store decodes (nil
// removes it).
func SetTestHookDecoded(f func(intent string)) { testHookDecoded = f }
