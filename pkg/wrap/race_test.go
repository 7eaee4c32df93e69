//go:build race

package wrap_test

// raceBuild says the tests run with -race, and so the wrap binary cmdtest.Build makes for them.
const raceBuild = true
