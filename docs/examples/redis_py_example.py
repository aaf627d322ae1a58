"""Bloomery's RESP port through redis-py: a filter, its items and its time to live."""
import os

import redis

r = redis.Redis(
    host=os.environ.get("BLOOMERY_HOST", "localhost"),
    port=int(os.environ.get("BLOOMERY_RESP_PORT", "6379")),
    password=os.environ.get("BLOOMERY_RESP_PASSWORD"),  # None: the port asks for none
    decode_responses=True,
)

bf = r.bf()
print("reserve:", bf.create("sessions", 0.001, 10000))  # True
print("add:", bf.add("sessions", "s-1"))  # 1: newly added
print("madd:", bf.madd("sessions", "s-1", "s-2"))  # [0, 1]
print("exists:", bf.exists("sessions", "s-2"))  # 1
print("mexists:", bf.mexists("sessions", "s-2", "s-3"))  # [1, 0]
print("items:", bf.info("sessions").insertedNum)  # 2

# The filter's expiry: EXPIRE sets a deadline, PERSIST takes it away.
print("expire:", r.expire("sessions", 3600))  # True
print("ttl:", r.ttl("sessions"))  # 3600
print("expire gt:", r.expire("sessions", 60, gt=True))  # False: 60 s is not later
print("pexpire lt:", r.pexpire("sessions", 90_000, lt=True))  # True
print("pttl <= 90000:", 0 < r.pttl("sessions") <= 90_000)  # True
print("persist:", r.persist("sessions"))  # True
print("ttl:", r.ttl("sessions"))  # -1: never expires
print("ttl of a missing key:", r.ttl("no-such-filter"))  # -2

try:
    r.expire("sessions", 10, nx=True, xx=True)
except redis.ResponseError as e:
    print("error:", e)  # NX and XX, GT or LT options at the same time are not compatible

print("expire in the past:", r.expire("sessions", -1))  # True: the filter is deleted
print("exists:", r.exists("sessions"))  # 0
