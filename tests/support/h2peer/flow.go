package main

import "sync"

// flow tracks the send windows the client grants (RFC 9113 §6.9), so a scenario that honours flow
// control waits for its WINDOW_UPDATEs.
type flow struct {
	mu      sync.Mutex
	cond    *sync.Cond
	conn    int64
	initial int64
	streams map[uint32]int64
	closed  bool
}

func newFlow() *flow {
	f := &flow{conn: 65535, initial: 65535, streams: map[uint32]int64{}}
	f.cond = sync.NewCond(&f.mu)
	return f
}

func (f *flow) open(id uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.streams[id]; !ok {
		f.streams[id] = f.initial
	}
}

func (f *flow) setInitial(v int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.streams {
		f.streams[id] += v - f.initial
	}
	f.initial = v
	f.cond.Broadcast()
}

func (f *flow) add(id uint32, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id == 0 {
		f.conn += n
	} else {
		f.streams[id] += n
	}
	f.cond.Broadcast()
}

func (f *flow) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.cond.Broadcast()
}

// take waits until n bytes may be sent on stream id and takes them; false once the connection closed.
func (f *flow) take(id uint32, n int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for !f.closed && (f.conn < n || f.streams[id] < n) {
		f.cond.Wait()
	}
	if f.closed {
		return false
	}
	f.conn -= n
	f.streams[id] -= n
	return true
}
