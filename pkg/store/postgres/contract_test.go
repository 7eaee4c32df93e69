package postgres

import (
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
)

func TestContract(t *testing.T) {
	t.Parallel()
	testURL(t)
	fencetest.Run(t, func(t *testing.T) fence.Store { return newTestStore(t) })
}

func TestContractDurable(t *testing.T) {
	testURL(t)
	fencetest.RunDurable(t, func(t *testing.T) func() fence.Store {
		schema := testSchema(t)
		return func() fence.Store { return openSchema(t, schema) }
	})
}
