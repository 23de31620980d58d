package main

import (
	"bytes"
	"encoding/binary"
	"net"
	"time"

	"golang.org/x/net/http2"
)

// scenarios: what each connection plays, by -scenario. Each serves the client's first request.
var scenarios = map[string]func(p *peer){
	// A header block of one HEADERS frame and -n empty CONTINUATION frames (the 2024 CONTINUATION
	// flood); a client still listening then gets END_HEADERS, a message and status OK.
	"continuation-flood": func(p *peer) {
		p.start()
		id, err := p.nextStream()
		if err != nil {
			return
		}
		b := p.block(":status", "200", "content-type", "application/grpc")
		if p.write(func() error {
			return p.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b})
		}) != nil {
			return
		}
		p.flood("CONTINUATION", p.opts.n, func(int) error { return p.wfr.WriteContinuation(id, false, nil) })
		if p.write(func() error { return p.wfr.WriteContinuation(id, true, nil) }) == nil {
			_ = p.finish(id, []byte{1})
		}
	},
	// -n PINGs to a client whose replies are never read (CVE-2019-9512).
	"ping-flood": func(p *peer) {
		p.stopReading = true
		p.start()
		if _, err := p.nextStream(); err != nil {
			return
		}
		p.flood("PING", p.opts.n, func(i int) error {
			var data [8]byte
			binary.BigEndian.PutUint64(data[:], uint64(i))
			return p.wfr.WritePing(false, data)
		})
	},
	// -n empty SETTINGS frames to a client whose acknowledgements are never read (CVE-2019-9515).
	"settings-flood": func(p *peer) {
		p.stopReading = true
		p.start()
		if _, err := p.nextStream(); err != nil {
			return
		}
		p.flood("SETTINGS", p.opts.n, func(int) error { return p.wfr.WriteSettings() })
	},
	// One gRPC message of -n bytes sent as DATA frames of one byte each, prefix included, within
	// the client's flow-control windows; then status OK. Byte i of the message is (i*31+7) & 0xff.
	"data-dribble": func(p *peer) {
		p.start()
		id, err := p.nextStream()
		if err != nil || p.respond(id) != nil {
			return
		}
		msg := frameMessage(pattern(p.opts.n))
		if dribble(p, id, msg) {
			_ = p.finish(id, nil)
		}
	},
	// One gRPC message of -n bytes in DATA frames of 16 KiB, each frame written one byte per TLS
	// record, so that it reaches the client over thousands of socket reads; then status OK.
	"split-frames": func(p *peer) {
		p.start()
		id, err := p.nextStream()
		if err != nil || p.respond(id) != nil {
			return
		}
		if splitFrames(p, id, frameMessage(pattern(p.opts.n))) {
			_ = p.finish(id, nil)
		}
	},
	// -n empty DATA frames without END_STREAM on the response (CVE-2019-9518), then a message and
	// status OK.
	"empty-data": func(p *peer) {
		p.start()
		id, err := p.nextStream()
		if err != nil || p.respond(id) != nil {
			return
		}
		p.flood("DATA", p.opts.n, func(int) error { return p.wfr.WriteData(id, false, nil) })
		_ = p.finish(id, []byte{1})
	},
	// -n PRIORITY frames (CVE-2019-9513: a client keeps no priority tree, but each frame costs work),
	// then the response.
	"priority-flood": func(p *peer) {
		p.start()
		id, err := p.nextStream()
		if err != nil {
			return
		}
		p.flood("PRIORITY", p.opts.n, func(i int) error {
			return p.wfr.WritePriority(id, http2.PriorityParam{StreamDep: uint32(2*i + 3), Weight: 15})
		})
		if p.respond(id) == nil {
			_ = p.finish(id, []byte{1})
		}
	},
	// Response headers with -n header fields of empty name and value (CVE-2019-9516), in HEADERS
	// and CONTINUATION frames of at most 16 KiB. hpack.Encoder indexes the first and then sends each
	// as one byte.
	"zero-headers": func(p *peer) {
		p.start()
		id, err := p.nextStream()
		if err != nil {
			return
		}
		pairs := []string{":status", "200", "content-type", "application/grpc"}
		for range p.opts.n {
			pairs = append(pairs, "", "")
		}
		b := p.block(pairs...)
		_ = p.write(func() error { return writeBlock(p, id, b) })
		_ = p.finish(id, []byte{1})
	},
	// A frame that is a stream error (WINDOW_UPDATE of 0 on the open stream), then -n more of it
	// for the stream the client has reset (CVE-2019-9514: each would cost a naive client an
	// RST_STREAM). The reader reports each RST_STREAM the client sends.
	"reset-flood": func(p *peer) {
		p.start()
		id, err := p.nextStream()
		if err != nil || p.respond(id) != nil {
			return
		}
		p.flood("WINDOW_UPDATE", p.opts.n+1, func(int) error { return p.wfr.WriteWindowUpdate(id, 0) })
	},
	// Every request is refused at once with RST_STREAM (REFUSED_STREAM): the 2023 rapid reset seen
	// from the client, whose retries must not loop hot. The reader reports each request.
	"rapid-reset": func(p *peer) {
		p.start()
		for {
			id, err := p.nextStream()
			if err != nil {
				return
			}
			if p.write(func() error { return p.wfr.WriteRSTStream(id, http2.ErrCodeRefusedStream) }) != nil {
				return
			}
		}
	},
	// A List answered with -n one-byte messages within the client's flow control, then status OK:
	// each costs the client an object, so a reader that keeps them all must stop somewhere
	// (CVE-2019-9517 at the Talos client).
	"list-flood": func(p *peer) {
		p.start()
		id, err := p.nextStream()
		if err != nil || p.respond(id) != nil {
			return
		}
		msg := frameMessage([]byte{0x0a})
		batch := bytes.Repeat(msg, 2048)
		for sent := 0; sent < p.opts.n; sent += 2048 {
			if !p.flow.take(id, int64(len(batch))) {
				report(map[string]any{"event": "sent", "conn": p.id, "what": "messages", "frames": sent})
				return
			}
			if p.write(func() error { return p.wfr.WriteData(id, false, batch) }) != nil {
				report(map[string]any{"event": "sent", "conn": p.id, "what": "messages", "frames": sent})
				return
			}
		}
		_ = p.finish(id, nil)
	},
	// A server that reads nothing after the first request but stays lively: it grants the largest
	// windows, shrinks its receive buffer, and sends a PING every 50 ms, -n times. A client
	// writing a large request must notice that nothing it writes is read.
	"no-read": func(p *peer) {
		if tcp, ok := p.conn.NetConn().(*net.TCPConn); ok {
			_ = tcp.SetReadBuffer(16 << 10)
		}
		p.stopReading = true
		p.start(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
		if p.write(func() error { return p.wfr.WriteWindowUpdate(0, 1<<31-1-65535) }) != nil {
			return
		}
		if _, err := p.nextStream(); err != nil {
			return
		}
		for i := range p.opts.n {
			time.Sleep(50 * time.Millisecond)
			var data [8]byte
			binary.BigEndian.PutUint64(data[:], uint64(i))
			if err := p.write(func() error { return p.wfr.WritePing(false, data) }); err != nil {
				report(map[string]any{"event": "sent", "conn": p.id, "what": "PING", "frames": i, "err": err.Error()})
				return
			}
		}
	},
	// -n DATA frames of 16 KiB, each full of empty gRPC messages, ignoring the client's flow control
	// (CVE-2019-9517 from the client's side: what it buffers for a reader that does not read).
	"window-overrun": func(p *peer) {
		p.start()
		id, err := p.nextStream()
		if err != nil || p.respond(id) != nil {
			return
		}
		chunk := make([]byte, 16380) // 3276 empty messages of 5 bytes
		p.flood("DATA", p.opts.n, func(int) error { return p.wfr.WriteData(id, false, chunk) })
	},
}

// pattern is the message of data-dribble: byte i is (i*31+7) & 0xff.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + 7)
	}
	return b
}

// dribble writes msg as one-byte DATA frames, taking flow-control credit 1024 bytes at a time
// (outside the write lock, so the reader can acknowledge meanwhile); false when the connection ended.
func dribble(p *peer, id uint32, msg []byte) bool {
	for off := 0; off < len(msg); {
		k := min(1024, len(msg)-off)
		if !p.flow.take(id, int64(k)) {
			return false
		}
		err := p.write(func() error {
			for i := range k {
				if err := p.wfr.WriteData(id, false, msg[off+i:off+i+1]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			report(map[string]any{"event": "sent", "conn": p.id, "what": "DATA", "frames": off, "err": err.Error()})
			return false
		}
		off += k
	}
	report(map[string]any{"event": "sent", "conn": p.id, "what": "DATA", "frames": len(msg)})
	return true
}

// splitFrames writes msg as DATA frames of 16 KiB made by the Framer, each written out one byte
// per flush (one TLS record each); false when the connection ended.
func splitFrames(p *peer, id uint32, msg []byte) bool {
	var frame bytes.Buffer
	fr := http2.NewFramer(&frame, nil)
	for off := 0; off < len(msg); {
		k := min(16384, len(msg)-off)
		if !p.flow.take(id, int64(k)) {
			return false
		}
		frame.Reset()
		if fr.WriteData(id, false, msg[off:off+k]) != nil {
			return false
		}
		b := frame.Bytes()
		for i := range b {
			if err := p.write(func() error { return p.bw.WriteByte(b[i]) }); err != nil {
				report(map[string]any{"event": "sent", "conn": p.id, "what": "DATA", "frames": off, "err": err.Error()})
				return false
			}
		}
		off += k
	}
	report(map[string]any{"event": "sent", "conn": p.id, "what": "DATA", "frames": len(msg)})
	return true
}

// writeBlock writes a header block as HEADERS and CONTINUATION frames of at most 16 KiB.
func writeBlock(p *peer, id uint32, b []byte) error {
	const max = 16384
	first := b[:min(len(b), max)]
	rest := b[len(first):]
	if err := p.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(rest) == 0}); err != nil {
		return err
	}
	for len(rest) > 0 {
		frag := rest[:min(len(rest), max)]
		rest = rest[len(frag):]
		if err := p.wfr.WriteContinuation(id, len(rest) == 0, frag); err != nil {
			return err
		}
	}
	return nil
}
