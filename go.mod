module github.com/seed0e69bba5/faceagent

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/eclipse/paho.golang v0.23.0
	github.com/mochi-mqtt/server/v2 v2.7.9
	github.com/tidwall/redcon v1.6.2
	github.com/tinylib/msgp v1.6.5
	go.bug.st/serial v1.8.0
	go.etcd.io/bbolt v1.5.0
	go.uber.org/goleak v1.3.0
	golang.org/x/crypto v0.58.0
	golang.org/x/sys v0.49.0
	golang.org/x/tools v0.36.0
)

require (
	github.com/gorilla/websocket v1.5.3 // indirect
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/rs/xid v1.4.0 // indirect
	github.com/tidwall/btree v1.1.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	golang.org/x/mod v0.27.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sync v0.20.0 // indirect
)

tool github.com/tinylib/msgp

replace github.com/mochi-mqtt/server/v2 => ./third_party/mochi
