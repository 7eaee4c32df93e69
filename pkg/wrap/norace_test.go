//go:build !race

package wrap_test

const raceBuild = false
