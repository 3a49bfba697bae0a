package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// closeTimeout bounds the goodbye of a listener's connection.
const closeTimeout = time.Second

// Listen tells wake whenever a write may have committed, until ctx ends:
// on every NOTIFY levee_catalog, and once each time it (re)connects, for
// what was written while it was not listening. It listens on a connection
// of its own, outside the pool, and reconnects after an error, waiting
// minBackoff, doubling to maxBackoff while connecting keeps failing.
func (s *Store) Listen(ctx context.Context, wake chan<- struct{}) {
	delay := minBackoff
	for {
		connected, err := s.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		if connected {
			delay = minBackoff
		}
		s.log.Warn("catalog: the change listener lost its connection; changes arrive by polling until it is back",
			"err", err, "retry_in", delay)
		t := s.clk.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		delay = min(2*delay, maxBackoff)
	}
}

// listenOnce connects, listens and forwards notices until the connection
// fails or ctx ends; connected says it got as far as listening.
func (s *Store) listenOnce(ctx context.Context, wake chan<- struct{}) (connected bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, s.listen.ConnectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, s.listen.Copy())
	if err != nil {
		return false, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		conn.Close(ctx)
	}()
	if _, err := conn.Exec(cctx, `LISTEN `+Channel); err != nil {
		return false, err
	}
	poke(wake)
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return true, err
		}
		poke(wake)
	}
}

// poke sends on wake unless a notice is already waiting there.
func poke(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}
