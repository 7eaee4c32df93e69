package fence_test

import (
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
)

func TestMemoryStoreContract(t *testing.T) {
	fencetest.Run(t, func(t *testing.T) fence.Store {
		st := fence.NewMemoryStore()
		t.Cleanup(func() { st.Close() })
		return st
	})
}
