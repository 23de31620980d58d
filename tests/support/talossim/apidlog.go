package main

// --apid mode: calls are counted from Talos' apid's log. apid logs each call when it ends
// (pkg/grpc/middleware/log), so GET /calls counts a call once it has ended, refused calls included,
// and a watch once it has closed.

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"regexp"
)

// apidCallLine matches the line apid's logging middleware writes when a call ends:
// "<code> [<method>] <duration> stream|unary <message> (<metadata>)".
var apidCallLine = regexp.MustCompile(`: (\w+) \[(/[^\]]+)\] \S+ (?:stream|unary) `)

// proxiedFrom marks a call another apid passed on (the `proxyfrom` metadata key): the call to the
// local machine by its address goes through apid twice, and is counted once.
var proxiedFrom = []byte("proxyfrom=")

// maxLogLine is the longest log line counted; a longer one is passed on in pieces, not counted.
const maxLogLine = 64 << 10

// countFromLog counts the calls apid's log reports, by method, and copies the log to w.
func (s *sim) countFromLog(r io.Reader, w io.Writer) {
	br := bufio.NewReaderSize(r, maxLogLine)
	whole := true // the piece read starts a line

	for {
		line, err := br.ReadSlice('\n')
		if whole && err == nil && !bytes.Contains(line, proxiedFrom) {
			if m := apidCallLine.FindSubmatch(line); m != nil {
				s.count(string(m[2]))
			}
		}

		_, _ = w.Write(line)

		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			whole = false
		case err != nil:
			return
		default:
			whole = true
		}
	}
}
