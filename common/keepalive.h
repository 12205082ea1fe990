// The keepalive pings of the workers' control streams, agreed between the
// two ends: a worker pings a quiet stream every kWorkerKeepaliveMs, and the
// server accepts pings up to twice as often. gRPC's server default (one
// ping in 5 minutes without data, two strikes) answered the workers' pings
// with a GOAWAY "too_many_pings" on a stream that waited for a command.
// A coordinator whose host vanished (links cut, or paused) is noticed by
// these pings alone: within kWorkerKeepaliveMs + kWorkerKeepaliveTimeoutMs,
// after which the worker goes to the next leader
// (docs/operating/high-availability.md).
#ifndef TRAINYARD_COMMON_KEEPALIVE_H_
#define TRAINYARD_COMMON_KEEPALIVE_H_

namespace trainyard {

inline constexpr int kWorkerKeepaliveMs = 5000;
inline constexpr int kWorkerKeepaliveTimeoutMs = 5000;
inline constexpr int kServerMinPingIntervalMs = kWorkerKeepaliveMs / 2;

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_KEEPALIVE_H_
