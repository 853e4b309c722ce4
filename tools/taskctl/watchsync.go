package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/agent/wire"
)

const watchSyncUsage = "usage: taskctl watch-sync [-url URL -gateway GW] [-timeout D] DEVICE\n"

// watchSync follows one terminal's whitelist sync reports (faceagent/{gw}/devices/{id}/sync)
// until a reconciliation ends: it prints "watching TOPIC" once subscribed (a script may
// then cause the drift), each report as it arrives, and exits 0 after a done report, 1
// after a failed one, a timeout or a lost connection.
func watchSync(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("taskctl watch-sync", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := submitOptions{}
	fs.StringVar(&o.URL, "url", "mqtt://127.0.0.1:1883", "the broker the agent reports to")
	fs.StringVar(&o.Gateway, "gateway", "gw-01", "the agent's gateway_id")
	fs.StringVar(&o.Username, "username", "", "MQTT user name")
	passwordEnv := fs.String("password-env", "TASKCTL_PASSWORD", "environment variable holding the MQTT password")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), watchSyncUsage+`
Waits for the terminal's next whitelist reconciliation and prints its sync reports
(started, then done or failed, with the persons missing, extra and changed).

Example:
  taskctl watch-sync -url mqtt://127.0.0.1:18830 -gateway demo-gw term-01

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprint(stderr, watchSyncUsage)
		return 2
	}
	dev := fs.Arg(0)
	o.Password = os.Getenv(*passwordEnv)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	reports := make(chan wire.SyncReport, 16)
	topic := wire.GatewayTopics(o.Gateway).DeviceSync(dev)
	c, err := dial(ctx, o, func(pr paho.PublishReceived) (bool, error) {
		if pr.Packet.Topic == topic {
			if s, err := wire.ParseSyncReport(pr.Packet.Payload); err == nil {
				select {
				case reports <- s:
				case <-ctx.Done():
				}
			}
		}
		return true, nil
	})
	if err != nil {
		fmt.Fprintln(stderr, "taskctl:", err)
		return 1
	}
	defer func() {
		_ = c.Disconnect(&paho.Disconnect{ReasonCode: 0})
		<-c.Done()
	}()
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}}); err != nil {
		fmt.Fprintln(stderr, "taskctl: subscribe:", err)
		return 1
	}
	fmt.Fprintf(stdout, "watching %s\n", topic)
	for {
		select {
		case s := <-reports:
			fmt.Fprintf(stdout, "sync %s %s: %s, missing %d, extra %d, changed %d, at %s", s.DeviceID, s.Reason, s.Status,
				s.Missing, s.Extra, s.Changed, s.At)
			if s.Error != "" {
				fmt.Fprintf(stdout, " (%s)", s.Error)
			}
			fmt.Fprintln(stdout)
			switch s.Status {
			case wire.SyncDone:
				return 0
			case wire.SyncFailed:
				return 1
			}
		case <-c.Done():
			fmt.Fprintln(stderr, "taskctl: connection to the broker lost")
			return 1
		case <-ctx.Done():
			fmt.Fprintf(stderr, "taskctl: no finished reconciliation of %s within %s\n", dev, *timeout)
			return 1
		}
	}
}
