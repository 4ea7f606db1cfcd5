// kubeletgo: a kubelet stand-in made of grpc-go, the gRPC library the
// kubelet itself uses. It serves Registration on <dir>/kubelet.sock, waits
// for one device plugin to register, then dials the plugin's socket as a
// kubelet does and drives every call a kubelet makes. Each result is one
// JSON line on stdout; any failure exits 1 with the reason on stderr.
//
// -authority path dials by socket path, so grpc-go sends the path as
// :authority (kubelets up to 1.25, and other grpc-go clients); -authority
// localhost sets it as kubelets from 1.26 do.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	api "gpulet/v1beta1"
)

type registration struct {
	got chan *api.RegisterRequest
}

func (r *registration) Register(ctx context.Context, req *api.RegisterRequest) (*api.Empty, error) {
	select {
	case r.got <- req:
	default:
	}
	return &api.Empty{}, nil
}

func emit(kind string, v interface{}) {
	b, _ := json.Marshal(map[string]interface{}{"call": kind, "result": v})
	fmt.Println(string(b))
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "kubeletgo: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	dir := flag.String("dir", "", "the device-plugins directory")
	authority := flag.String("authority", "path", "path or localhost")
	size := flag.Int("size", 2, "GPUs to ask for")
	timeout := flag.Duration("timeout", 20*time.Second, "for the whole run")
	flag.Parse()
	if *dir == "" {
		fail("-dir is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	sock := filepath.Join(*dir, "kubelet.sock")
	os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		fail("listen %s: %v", sock, err)
	}
	srv := grpc.NewServer()
	reg := &registration{got: make(chan *api.RegisterRequest, 1)}
	api.RegisterRegistrationServer(srv, reg)
	go srv.Serve(lis)
	defer srv.Stop()
	fmt.Println(`{"call":"listening"}`)

	var req *api.RegisterRequest
	select {
	case req = <-reg.got:
	case <-ctx.Done():
		fail("no Register within %v", *timeout)
	}
	emit("Register", req)

	target := filepath.Join(*dir, req.Endpoint)
	opts := []grpc.DialOption{
		grpc.WithInsecure(), grpc.WithBlock(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", target)
		}),
	}
	if *authority == "localhost" {
		opts = append(opts, grpc.WithAuthority("localhost"))
	} else if *authority != "path" {
		fail("-authority must be path or localhost")
	}
	conn, err := grpc.DialContext(ctx, target, opts...)
	if err != nil {
		fail("dial %s: %v", target, err)
	}
	defer conn.Close()
	dp := api.NewDevicePluginClient(conn)

	o, err := dp.GetDevicePluginOptions(ctx, &api.Empty{})
	if err != nil {
		fail("GetDevicePluginOptions: %v", err)
	}
	emit("GetDevicePluginOptions", o)

	stream, err := dp.ListAndWatch(ctx, &api.Empty{})
	if err != nil {
		fail("ListAndWatch: %v", err)
	}
	law, err := stream.Recv()
	if err != nil {
		fail("ListAndWatch: %v", err)
	}
	emit("ListAndWatch", law)
	var ids []string
	for _, d := range law.Devices {
		ids = append(ids, d.ID)
	}

	pref, err := dp.GetPreferredAllocation(ctx, &api.PreferredAllocationRequest{
		ContainerRequests: []*api.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: ids, AllocationSize: int32(*size)},
		},
	})
	if err != nil {
		fail("GetPreferredAllocation: %v", err)
	}
	emit("GetPreferredAllocation", pref)
	chosen := pref.ContainerResponses[0].DeviceIDs

	alloc, err := dp.Allocate(ctx, &api.AllocateRequest{
		ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: chosen}},
	})
	if err != nil {
		fail("Allocate: %v", err)
	}
	emit("Allocate", alloc)

	_, err = dp.Allocate(ctx, &api.AllocateRequest{
		ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: []string{"GPU-nonexistent"}}},
	})
	emit("AllocateUnknown", fmt.Sprint(err))
}
