package config_test

import (
	"fmt"

	"github.com/seed0e69bba5/faceagent/agent/config"
)

func ExampleParse() {
	src := `
[agent]
gateway_id = "gw-01"

[broker]
listen = "127.0.0.1:1883"

[dispatch]
retry_interval = "1s"

[[devices]]
id = "2042253"
max_tries = 3
`
	cfg, err := config.Parse("agent.toml", []byte(src), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	d := cfg.Device("2042253")
	eff := d.Effective(cfg.Dispatch)
	fmt.Println(eff.RetryInterval, eff.MaxTries, eff.HeartbeatTimeout, cfg.Topics.Command(d.ID))
	// Output: 1s 3 30s dev/face/2042253
}

func ExampleParse_errors() {
	src := `
[agent]
gateway_id = "gw/01"

[dispatch]
max_tries = 0
retry_intervall = "2s"
`
	_, err := config.Parse("agent.toml", []byte(src), nil)
	fmt.Println(err)
	// Output: agent.toml:7: dispatch.retry_intervall: unknown key (did you mean "dispatch.retry_interval"?)
}
