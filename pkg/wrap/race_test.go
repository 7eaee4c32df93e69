//go:build race

package wrap_test

// raceBuild makes TestMain build the wrap binary with -race when the tests run with -race.
const raceBuild = true
