package netcut

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"time"
)

// NewPostgres starts a proxy in front of a PostgreSQL server (host:port) that also knows the
// server's side of the wire protocol: it counts round trips (RoundTrips) and can lose the
// answer of a chosen one (LoseAnswer). Clients must not use TLS through it (sslmode=disable):
// a connection that does is forwarded as it is, and neither counted nor cut.
func NewPostgres(upstream string) (*Proxy, error) {
	p, err := New(upstream)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.pg = true
	p.mu.Unlock()
	return p, nil
}

// RoundTrips returns how many round trips clients completed through a NewPostgres proxy: the
// server's ReadyForQuery messages, one at the end of every simple query and every Sync of
// the extended protocol (pgx sends a batch with one Sync). Not counted: a connection's start
// (whose authentication ends with one), a pool's ping (an empty query), and a round trip that
// only prepared statements (pgx describes each statement new to a connection in a round trip
// of its own before the first batch that runs it), so the count is that of the round trips
// that ran statements.
func (p *Proxy) RoundTrips() int64 { return p.trips.Load() }

// LoseAnswer arms a NewPostgres proxy: the k-th round trip (k ≥ 1) counted from now reaches
// the server whole and the server runs it, but its answer never reaches the client. The proxy
// holds the answer back until the server has sent all of it (its ReadyForQuery: the server
// has finished the round trip, a COMMIT in it included), drops it, and closes that
// connection; the client sees its connection die while waiting. With down > 0 the database
// then becomes unreachable too, as Cut(down) makes it: every other connection is dropped and
// new ones are refused for down.
func (p *Proxy) LoseAnswer(k int, down time.Duration) { p.LoseAnswerAnd(k, down, nil) }

// LoseAnswerAnd is LoseAnswer that also calls look (unless nil) once the server has finished
// the chosen round trip, before its answer is dropped, its connection closed or the database
// made unreachable: the client is still waiting for that answer then, so what look reads of
// the database past the proxy tells what that round trip did (a test's way to know whose
// round trip it was, when the client's other connections may make round trips of their own).
func (p *Proxy) LoseAnswerAnd(k int, down time.Duration, look func()) {
	p.mu.Lock()
	p.loseAt, p.loseDown, p.loseLook = p.trips.Load()+int64(k), down, look
	p.mu.Unlock()
}

// HoldAnswer arms a NewPostgres proxy: the k-th round trip (k ≥ 1) counted from now reaches
// the server whole and the server runs it (a COMMIT in it included), but once the server has
// sent all of its answer the proxy freezes (Freeze) and holds that answer with every other
// byte, closing nothing, until Heal: a server that stopped answering right after it ran a
// round trip, on a network that still acknowledges every packet.
func (p *Proxy) HoldAnswer(k int) {
	p.mu.Lock()
	p.holdAt = p.trips.Load() + int64(k)
	p.mu.Unlock()
}

// Lost returns how many answers LoseAnswer made the proxy drop.
func (p *Proxy) Lost() int64 { return p.lost.Load() }

// pgAnswers copies the server's messages (src) to the client (dst), one round trip at a time:
// a round trip's messages are held until its ReadyForQuery arrives, then forwarded together,
// or dropped with the connection when it is the round trip LoseAnswer chose. Messages that
// come between round trips (a notification, a notice, a parameter's new value) are forwarded
// as they come, and a COPY's start is forwarded at once (the server then waits for the
// client). id numbers the connection; conns are its two ends.
func (p *Proxy) pgAnswers(dst io.Writer, src io.Reader, id int64, conns ...net.Conn) error {
	r := bufio.NewReaderSize(src, 32<<10)
	// A client that asked for TLS (or GSS encryption) gets a single byte first: 'N' (go on
	// without it) or 'S'/'G' (encrypted from here: not readable, forwarded as it is).
	first, err := r.Peek(1)
	if err != nil {
		return err
	}
	if first[0] == 'N' || first[0] == 'S' || first[0] == 'G' {
		b, _ := r.ReadByte()
		p.waitThaw(id)
		if _, err := dst.Write([]byte{b}); err != nil {
			return err
		}
		if b != 'N' {
			return p.copy(dst, r, id)
		}
	}
	started := false // the connection's start ended (its first ReadyForQuery)
	var held []byte  // the messages of the round trip under way
	// So far the round trip under way holds nothing but an empty query's answer (a pool's
	// ping) or statements' descriptions (a client preparing statements it then executes in
	// the next round trip): neither is counted.
	idle := true
	head := make([]byte, 5)
	for {
		if _, err := io.ReadFull(r, head); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(head[1:])) - 4
		if n < 0 {
			return io.ErrUnexpectedEOF
		}
		start := len(held)
		held = append(held, head...)
		held = append(held, make([]byte, n)...)
		if _, err := io.ReadFull(r, held[start+5:]); err != nil {
			return err
		}
		typ := head[0]
		switch {
		case !started:
			// The start (authentication among it) goes message by message.
			started = typ == 'Z'
		case typ == 'Z':
			if idle {
				break
			}
			n := p.trips.Add(1)
			p.holds(n)
			if p.loses(n) {
				for _, c := range conns {
					c.Close()
				}
				return nil
			}
		case start == 0 && (typ == 'A' || typ == 'N' || typ == 'S'):
			// Between round trips: a notification, a notice or a parameter status.
		case typ == 'G' || typ == 'H' || typ == 'W':
			// A COPY began: the server waits for the client, which must hear of it now.
			idle = false
		default:
			// EmptyQueryResponse, ParseComplete, ParameterDescription, RowDescription, NoData.
			idle = idle && (typ == 'I' || typ == '1' || typ == 't' || typ == 'T' || typ == 'n')
			continue
		}
		p.waitThaw(id)
		if _, err := dst.Write(held); err != nil {
			return err
		}
		held = held[:0]
		if typ == 'Z' {
			idle = true
		}
	}
}

// holds freezes the proxy if round trip n is the one HoldAnswer chose, and disarms it.
func (p *Proxy) holds(n int64) {
	p.mu.Lock()
	if p.holdAt != 0 && n == p.holdAt {
		p.holdAt, p.frozen = 0, true
	}
	p.mu.Unlock()
}

// loses says whether round trip n is the one whose answer LoseAnswer chose, and if so disarms
// it and, when asked to, makes the database unreachable.
func (p *Proxy) loses(n int64) bool {
	p.mu.Lock()
	at, down, look := p.loseAt, p.loseDown, p.loseLook
	if at == 0 || n != at {
		p.mu.Unlock()
		return false
	}
	p.loseAt, p.loseLook = 0, nil
	p.mu.Unlock()
	if look != nil {
		look()
	}
	p.lost.Add(1)
	if down > 0 {
		p.Cut(down)
	}
	return true
}
