"""Allocate, list and watch addresses through the generated Python client.

    PYTHONPATH=clients/python python3 clients/python/examples/allocate_list_watch.py \
        --addr 127.0.0.1:7401 --pool demo-py --cidr 10.250.0.0/29

Creates the pool (or finds it), allocates an address for three Pods, lists
the pool's allocations two per page, then watches it: the snapshot, SYNCED,
and the event of one more allocation made while the watch is open. Prints
one JSON object with what it saw, so scripts and tests can read it.
"""

import argparse
import json
import sys

import grpc

from plexus.allocator.v1 import allocator_pb2 as pb
from plexus.allocator.v1 import allocator_pb2_grpc as rpc


def owner(name):
    return pb.Owner(cluster="py", kind="Pod", namespace="shop", name=name, uid="uid-" + name)


def create_pool(stub, pool_id, cidr):
    try:
        stub.CreatePool(pb.CreatePoolRequest(pool_id=pool_id, pool=pb.Pool(cidrs=[cidr]),
                                             request_id="py-create-" + pool_id))
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.ALREADY_EXISTS:
            raise


def list_all(stub, pool):
    addrs, token, pages = [], "", 0
    while True:
        resp = stub.ListAllocations(pb.ListAllocationsRequest(pool=pool, page_size=2, page_token=token))
        pages += 1
        addrs += [a.address for a in resp.allocations]
        token = resp.next_page_token
        if not token:
            return addrs, pages


def watch(stub, pool, then):
    """Reads the watch's snapshot up to SYNCED, calls then(), and returns the
    snapshot's addresses and the first change after it."""
    call = stub.WatchAllocations(pb.WatchAllocationsRequest(pool=pool), timeout=30)
    snapshot, change = [], None
    try:
        for ev in call:
            if ev.type == pb.EVENT_TYPE_SYNCED:
                then()
            elif ev.resume_revision == 0 and change is None and ev.type == pb.EVENT_TYPE_ADDED:
                snapshot.append(ev.allocation.address)
            else:
                change = {"type": pb.EventType.Name(ev.type), "address": ev.allocation.address,
                          "owner": ev.allocation.owner.name}
                return snapshot, change
    finally:
        call.cancel()
    return snapshot, change


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--addr", default="127.0.0.1:7401")
    ap.add_argument("--pool", default="demo-py")
    ap.add_argument("--cidr", default="10.250.0.0/29")
    ap.add_argument("--late", default="pod-late", help="owner allocated while the watch runs")
    args = ap.parse_args()

    with grpc.insecure_channel(args.addr) as ch:
        stub = rpc.AllocatorServiceStub(ch)
        create_pool(stub, args.pool, args.cidr)
        pool = "pools/" + args.pool
        allocated = [stub.Allocate(pb.AllocateRequest(pool=pool, owner=owner("pod-%d" % i))).allocation.address
                     for i in range(3)]
        listed, pages = list_all(stub, pool)
        late = []
        snapshot, change = watch(stub, pool, lambda: late.append(
            stub.Allocate(pb.AllocateRequest(pool=pool, owner=owner(args.late))).allocation.address))
        try:
            stub.Allocate(pb.AllocateRequest(pool="pools/no-such-pool", owner=owner("pod-x")))
            missing = "OK"
        except grpc.RpcError as e:
            missing = e.code().name
    json.dump({"allocated": allocated, "listed": listed, "pages": pages, "snapshot": snapshot,
               "late": late, "change": change, "missing_pool": missing}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
