package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// peer is one accepted connection: a reader of the client's frames and a writer of the scenario's.
type peer struct {
	conn   *tls.Conn
	opts   options
	br     *bufio.Reader
	rfr    *http2.Framer // reads the client's frames from br
	wfr    *http2.Framer // writes ours into bw
	bw     *bufio.Writer
	wmu    sync.Mutex
	enc    *hpack.Encoder
	encBuf bytes.Buffer
	// streams receives the id of each request (HEADERS from the client), in order.
	streams chan uint32
	flow    *flow
	// stopReading: after the first request the reader stops for good (the peer "never reads").
	stopReading bool
	id          int
}

var (
	connMu   sync.Mutex
	connSeen int
)

func serve(c *tls.Conn, opts options) {
	connMu.Lock()
	connSeen++
	id := connSeen
	connMu.Unlock()
	if err := c.Handshake(); err != nil {
		report(map[string]any{"event": "handshake", "conn": id, "err": err.Error()})
		return
	}
	p := &peer{conn: c, opts: opts, id: id, streams: make(chan uint32, 1<<16), flow: newFlow()}
	p.bw = bufio.NewWriterSize(c, 64<<10)
	p.wfr = http2.NewFramer(p.bw, nil)
	p.wfr.AllowIllegalWrites = true
	p.br = bufio.NewReaderSize(c, 64<<10)
	p.rfr = http2.NewFramer(nil, p.br)
	p.rfr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.enc = hpack.NewEncoder(&p.encBuf)
	report(map[string]any{"event": "conn", "conn": id})
	scenarios[opts.scenario](p)
}

// start sends our SETTINGS (the server preface) and starts reading the client's frames.
func (p *peer) start(settings ...http2.Setting) {
	p.write(func() error { return p.wfr.WriteSettings(settings...) })
	go p.readLoop()
}

// readLoop reads the client's preface and frames, reports what matters, acknowledges SETTINGS and
// PING, and tracks the flow-control windows the client grants.
func (p *peer) readLoop() {
	defer p.flow.close()
	buf := make([]byte, len(clientPreface))
	if _, err := io.ReadFull(p.br, buf); err != nil || string(buf) != clientPreface {
		report(map[string]any{"event": "closed", "conn": p.id, "err": "no client preface"})
		return
	}
	for {
		f, err := p.rfr.ReadFrame()
		if err != nil {
			report(map[string]any{"event": "closed", "conn": p.id, "err": err.Error()})
			return
		}
		if !p.onFrame(f) {
			// The peer that never reads: keep the connection open, read nothing more.
			select {}
		}
	}
}

// onFrame handles one client frame; false when the reader must stop reading.
func (p *peer) onFrame(f http2.Frame) bool {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		id := f.Header().StreamID
		report(map[string]any{"event": "headers", "conn": p.id, "stream": id})
		p.flow.open(id)
		p.streams <- id
		return !p.stopReading
	case *http2.SettingsFrame:
		if f.IsAck() {
			return true
		}
		if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
			p.flow.setInitial(int64(v))
		}
		p.write(func() error { return p.wfr.WriteSettingsAck() })
	case *http2.WindowUpdateFrame:
		p.flow.add(f.Header().StreamID, int64(f.Increment))
	case *http2.RSTStreamFrame:
		report(map[string]any{"event": "rst", "conn": p.id, "stream": f.Header().StreamID, "code": uint32(f.ErrCode)})
	case *http2.GoAwayFrame:
		report(map[string]any{"event": "goaway", "conn": p.id, "code": uint32(f.ErrCode), "debug": string(f.DebugData())})
	case *http2.PingFrame:
		if !f.IsAck() {
			data := f.Data
			p.write(func() error { return p.wfr.WritePing(true, data) })
		}
	}
	return true
}

// write runs w under the write lock and flushes; a write error is reported once and ends nothing
// else (the scenario sees it on its next write).
func (p *peer) write(w func() error) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	err := w()
	if err == nil {
		err = p.bw.Flush()
	}
	return err
}

// flood writes n frames made by one(i), flushing every 1024, and reports how many went out and the
// write error that stopped it (the client closed the connection), if any.
func (p *peer) flood(what string, n int, one func(i int) error) {
	sent := 0
	var err error
	for sent < n && err == nil {
		p.wmu.Lock()
		for k := 0; k < 1024 && sent < n; k++ {
			if err = one(sent); err != nil {
				break
			}
			sent++
		}
		if err == nil {
			err = p.bw.Flush()
		}
		p.wmu.Unlock()
	}
	ev := map[string]any{"event": "sent", "conn": p.id, "what": what, "frames": sent}
	if err != nil {
		ev["err"] = err.Error()
	}
	report(ev)
}

// block encodes header fields given as name, value pairs.
func (p *peer) block(pairs ...string) []byte {
	p.encBuf.Reset()
	for i := 0; i+1 < len(pairs); i += 2 {
		_ = p.enc.WriteField(hpack.HeaderField{Name: pairs[i], Value: pairs[i+1]})
	}
	return bytes.Clone(p.encBuf.Bytes())
}

// nextStream waits for the client's next request.
func (p *peer) nextStream() (uint32, error) {
	id, ok := <-p.streams
	if !ok {
		return 0, errors.New("no request")
	}
	return id, nil
}

// respond sends the gRPC response headers on stream id.
func (p *peer) respond(id uint32) error {
	b := p.block(":status", "200", "content-type", "application/grpc")
	return p.write(func() error {
		return p.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndHeaders: true})
	})
}

// finish sends one gRPC message (unless nil) and the trailers with status OK.
func (p *peer) finish(id uint32, message []byte) error {
	t := p.block("grpc-status", "0")
	return p.write(func() error {
		if message != nil {
			if err := p.wfr.WriteData(id, false, frameMessage(message)); err != nil {
				return err
			}
		}
		return p.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: t, EndHeaders: true, EndStream: true})
	})
}

// frameMessage prefixes a gRPC message with its uncompressed Length-Prefixed-Message header.
func frameMessage(m []byte) []byte {
	out := make([]byte, 5+len(m))
	out[1], out[2], out[3], out[4] = byte(len(m)>>24), byte(len(m)>>16), byte(len(m)>>8), byte(len(m))
	copy(out[5:], m)
	return out
}
