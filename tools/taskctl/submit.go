package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// submitOptions are the flags of `taskctl submit`.
type submitOptions struct {
	URL      string
	Gateway  string
	Username string
	Password string
	Batch    int           // tasks per message
	Inflight int           // messages awaiting PUBACK at once
	Follow   bool          // wait for the outcomes
	Timeout  time.Duration // for following; 0 = no limit
	Live     bool          // redraw the progress block in place (a terminal)
	Every    time.Duration // progress refresh period
}

// plainEvery is the least time between two progress lines when output is not a terminal.
const plainEvery = 2 * time.Second

// ErrIncomplete is returned when following ended before every task had an outcome.
var ErrIncomplete = errors.New("not every task has an outcome")

// submit publishes the tasks to faceagent/{gw}/tasks with QoS 1 and, with Follow, shows
// their progress from faceagent/{gw}/results and …/deadletter until each has an outcome,
// with the whitelist sync reports seen meanwhile on …/devices/+/sync. Results are
// subscribed before the first task leaves, so none is missed; a sync report that comes
// after the last outcome is not shown.
func submit(ctx context.Context, o submitOptions, tasks []pending, out io.Writer) error {
	tr := newTracker(tasks)
	prefix := "faceagent/" + o.Gateway + "/"
	topics := wire.GatewayTopics(o.Gateway)
	c, err := dial(ctx, o, func(pr paho.PublishReceived) (bool, error) {
		topic := pr.Packet.Topic
		if strings.HasPrefix(topic, topics.Devices) && strings.HasSuffix(topic, "/sync") {
			if s, err := wire.ParseSyncReport(pr.Packet.Payload); err == nil {
				tr.sync(s)
			}
			return true, nil
		}
		switch topic {
		case prefix + "results":
			if r, err := wire.ParseResult(pr.Packet.Payload); err == nil {
				tr.result(r)
			}
		case prefix + "deadletter":
			if d, err := wire.ParseDeadLetter(pr.Packet.Payload); err == nil {
				tr.deadletter(d)
			}
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Disconnect(&paho.Disconnect{ReasonCode: 0})
		select {
		case <-c.Done():
		case <-dctx.Done():
		}
	}()
	if o.Follow {
		_, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
			{Topic: prefix + "results", QoS: 1},
			{Topic: prefix + "deadletter", QoS: 1},
			{Topic: topics.DeviceSync("+"), QoS: 1},
		}})
		if err != nil {
			return fmt.Errorf("subscribe: %w", err)
		}
	}

	start := time.Now()
	if err := publishAll(ctx, c, prefix+"tasks", tasks, o); err != nil {
		return err
	}
	fmt.Fprintf(out, "submitted %s in %s\n", count(len(tasks), "task", "tasks"), time.Since(start).Round(time.Millisecond))
	if !o.Follow {
		return nil
	}

	var timeout <-chan time.Time
	if o.Timeout > 0 {
		timer := time.NewTimer(o.Timeout)
		defer timer.Stop()
		timeout = timer.C
	}
	tick := time.NewTicker(o.Every)
	defer tick.Stop()
	if o.Live {
		tr.render(out, false)
	}
	lastShown, lastAt := -1, time.Time{}
	var result error
loop:
	for {
		select {
		case <-tr.Done():
			break loop
		case <-tick.C:
			if o.Live {
				tr.render(out, true)
			} else if n, total := tr.progress(); n != lastShown && time.Since(lastAt) >= plainEvery {
				// Not a terminal (a log, CI): a line now and then, not a redraw.
				fmt.Fprintf(out, "progress %d/%d\n", n, total)
				lastShown, lastAt = n, time.Now()
			}
		case <-timeout:
			n, total := tr.progress()
			result = fmt.Errorf("%w: %d of %d after %s", ErrIncomplete, total-n, total, o.Timeout)
			break loop
		case <-ctx.Done():
			n, total := tr.progress()
			result = fmt.Errorf("%w: %d of %d (%v)", ErrIncomplete, total-n, total, ctx.Err())
			break loop
		case <-c.Done():
			result = errors.New("connection to the broker lost")
			break loop
		}
	}
	if o.Live {
		tr.render(out, true)
	}
	tr.summary(out, time.Since(start))
	return result
}

// publishAll sends the tasks in messages of o.Batch, each terminal's tasks on one worker
// so that they reach the agent in file order (a later task for a person supersedes an
// earlier one, so order matters), with up to o.Inflight messages awaiting PUBACK.
func publishAll(ctx context.Context, c *paho.Client, topic string, tasks []pending, o submitOptions) error {
	workers := max(o.Inflight, 1)
	perWorker := make([][]pending, workers)
	for _, t := range tasks {
		h := fnv.New32a()
		h.Write([]byte(t.deviceID))
		w := int(h.Sum32() % uint32(workers))
		perWorker[w] = append(perWorker[w], t)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for _, mine := range perWorker {
		if len(mine) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, msg := range batches(mine, o.Batch) {
				// paho turns a PUBACK reason code >= 0x80 (not authorized, quota
				// exceeded, …) into an error.
				if _, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: msg}); err != nil {
					errc <- fmt.Errorf("publish: %w", err)
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc // nil when no worker failed
}

// dial connects a paho client to the broker at o.URL with a fresh session.
func dial(ctx context.Context, o submitOptions, onPublish func(paho.PublishReceived) (bool, error)) (*paho.Client, error) {
	u, err := url.Parse(o.URL)
	if err != nil {
		return nil, fmt.Errorf("-url: %w", err)
	}
	host := u.Host
	useTLS := false
	switch u.Scheme {
	case "mqtt", "tcp":
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "1883")
		}
	case "mqtts", "ssl", "tls":
		useTLS = true
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "8883")
		}
	default:
		return nil, fmt.Errorf("-url: scheme %q: use mqtt:// or mqtts://", u.Scheme)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var conn net.Conn
	if useTLS {
		d := tls.Dialer{Config: &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}}
		conn, err = d.DialContext(dctx, "tcp", host)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(dctx, "tcp", host)
	}
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", host, err)
	}
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	c := paho.NewClient(paho.ClientConfig{
		ClientID:          "taskctl-" + hex.EncodeToString(id),
		Conn:              conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){onPublish},
	})
	cp := &paho.Connect{ClientID: "taskctl-" + hex.EncodeToString(id), KeepAlive: 30, CleanStart: true}
	if o.Username != "" {
		cp.Username, cp.UsernameFlag = o.Username, true
		cp.Password, cp.PasswordFlag = []byte(o.Password), o.Password != ""
	}
	ack, err := c.Connect(dctx, cp)
	if err != nil {
		conn.Close()
		if ack != nil && ack.ReasonCode != 0 {
			return nil, fmt.Errorf("connect %s: refused with reason code 0x%02x: %w", host, ack.ReasonCode, err)
		}
		return nil, fmt.Errorf("connect %s: %w", host, err)
	}
	return c, nil
}
