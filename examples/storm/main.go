// Command storm fires one $49.00 charge 1,000 times at once through the fence and shows that
// the card is charged exactly once. It exits non-zero unless there was exactly one execution.
package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/effectfence/effectfence/pkg/fence"
)

func main() {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	var charged atomic.Int64
	res, err := storm(context.Background(), eng, func() []byte {
		n := charged.Add(1)
		return []byte(fmt.Sprintf(`{"charge":"ch_%04d","amount":%d,"status":"succeeded"}`, n, amountCents))
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(1)
	}
	fmt.Printf("storm: %d attempts at one $%.2f charge (%d waves of %d racers)\n", stormAttempt, float64(amountCents)/100, waves, racersAWave)
	fmt.Printf("  executions            %d   (card charged %d time(s), counted by the charge itself)\n", res.Executions, charged.Load())
	fmt.Printf("  receipts served       %d\n", res.Receipts)
	fmt.Printf("  told to stand down    %d\n", res.StoodDown)
	fmt.Printf("  distinct receipts     %d\n", res.CertHashes)
	fmt.Printf("  elapsed               %s\n", res.Elapsed.Round(1000))
	fmt.Printf("  dollars prevented     $%.2f\n", float64(res.Stats.Prevented())*float64(amountCents)/100)
	fmt.Println(" ", fence.Stats{SinceBoot: res.Stats}.Line())
	if res.Executions != 1 || charged.Load() != 1 || res.Other != 0 || res.CertHashes != 1 ||
		res.Executions+res.Receipts+res.StoodDown != stormAttempt {
		fmt.Fprintf(os.Stderr, "storm: FAILED: want exactly 1 execution and every attempt accounted for, got %+v\n", res)
		os.Exit(1)
	}
	fmt.Println("storm: OK, exactly one execution")
}
