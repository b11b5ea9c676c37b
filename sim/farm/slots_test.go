package farm

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Waiters get slots in arrival order, and nobody overtakes the queue.
func TestSlotPoolFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSlotPool(1, time.Now)
		done := make(chan struct{})
		if _, ok := p.acquire(context.Background(), done); !ok {
			t.Fatal("first acquire failed")
		}
		var (
			mu    sync.Mutex
			order []int
		)
		for i := 0; i < 5; i++ {
			go func() {
				if _, ok := p.acquire(context.Background(), done); ok {
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					p.release()
				}
			}()
			synctest.Wait() // goroutine i is queued before i+1 starts
		}
		if _, waiting, _ := p.snapshot(); waiting != 5 {
			t.Fatalf("waiting = %d, want 5", waiting)
		}
		p.release()
		time.Sleep(time.Second)
		synctest.Wait()
		for i, v := range order {
			if v != i {
				t.Fatalf("order = %v, want 0..4", order)
			}
		}
		if busy, waiting, _ := p.snapshot(); busy != 0 || waiting != 0 || len(order) != 5 {
			t.Fatalf("busy=%d waiting=%d served=%d", busy, waiting, len(order))
		}
	})
}

// A waiter whose context ends leaves the queue; the slot goes to the next.
func TestSlotPoolCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSlotPool(1, time.Now)
		done := make(chan struct{})
		p.acquire(context.Background(), done)
		ctx, cancel := context.WithCancel(context.Background())
		gotA := make(chan bool, 1)
		go func() { _, ok := p.acquire(ctx, done); gotA <- ok }()
		synctest.Wait()
		gotB := make(chan bool, 1)
		go func() { _, ok := p.acquire(context.Background(), done); gotB <- ok }()
		synctest.Wait()
		cancel()
		if <-gotA {
			t.Fatal("cancelled waiter got a slot")
		}
		p.release()
		if !<-gotB {
			t.Fatal("second waiter did not get the slot")
		}
		close(done) // closing the farm releases every waiter
		gotC := make(chan bool, 1)
		go func() { _, ok := p.acquire(context.Background(), done); gotC <- ok }()
		if <-gotC {
			t.Fatal("acquire after done succeeded")
		}
	})
}

// BusyTime integrates busy slots over (fake) time.
func TestSlotPoolBusyTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSlotPool(4, time.Now)
		done := make(chan struct{})
		p.acquire(context.Background(), done)
		p.acquire(context.Background(), done)
		time.Sleep(100 * time.Millisecond) // 2 busy
		p.release()
		time.Sleep(100 * time.Millisecond) // 1 busy
		_, _, bt := p.snapshot()
		if bt != 300*time.Millisecond {
			t.Fatalf("busy time = %v, want 300ms", bt)
		}
	})
}
