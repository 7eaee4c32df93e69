module github.com/effectfence/effectfence

go 1.26.8

require (
	github.com/gowebpki/jcs v1.0.2
	github.com/urfave/cli/v3 v3.14.0
)
