module github.com/mochi-mqtt/server/v2

go 1.21

require github.com/rs/xid v1.4.0
