//go:build !linux

package upgrade

import "net"

// listenConfig leaves keep-alive to net, which sets it on each accepted
// connection: not every system copies it from the listening socket.
var listenConfig = net.ListenConfig{}
