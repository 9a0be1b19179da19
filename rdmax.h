/* rdmax.h 0.2.0 - a header-only RDMA transport in C: verbs RC and UD send, put, get and atomics.

   Do this in exactly one C (or C++) file of your project:

       #define RDMAX_TRANSPORT_RC            (and/or RDMAX_TRANSPORT_UD)
       #define RDMAX_IMPLEMENTATION
       #include "rdmax.h"

   and in every other file that uses it, the same transport selection without RDMAX_IMPLEMENTATION.
   Copy rdmax.h and rdmax_impl.h side by side and link with -libverbs -lrdmacm -lnuma, or `make install`
   them (include/rdmax/ and rdmax.pc) and build with `pkg-config --cflags --libs rdmax`.

   CONTENTS (search for a heading in capitals; code sections open with a "---- name ----" banner)
     Manual:  TRANSPORT SELECTION, OPTIONAL DEFINES, ENVIRONMENT, STEP BY STEP, FAST-PATH RULES (and THE
              COMPLETION CONTRACT), COMPLETION OBJECTS, FABRICS AND DEVICE CAPABILITIES, ORDERING AND
              DELIVERY, CONNECTING, PENDING QUEUE,
              UD AND MULTICAST, RECEIVING (RC), REPLYING TO A REQUEST (RC), LIMITS, THREAD SAFETY (and
              THREADS AND SHARED REGISTRATIONS), ERROR HANDLING, LOGGING, FAILURES, WATCHDOG, KEEPALIVE,
              DISCONNECT, CONNECTION SETUP, ADMISSION, REGISTRATION CACHE (and ROUTES), DESIGN NOTES,
              LICENSE (end of file)
     Code, one header (one include guard, one extern "C"). First what a program uses, by object:
              ---- transport selection, ---- includes and portability, ---- status codes,
              ---- constants (also log items), ---- types (rdmax_comp, rdmax_req, rdmax_mem, rdmax_rbuf,
              descs, counters), ---- API: names, context, memory, connecting, endpoints, multicast,
              batching, pending queue, ---- rcache: the registration cache, ---- rcache: API,
              ---- profile: variables, events, points, ---- profile: API, ---- API: operations and
              progress (send, put, get, atomics, batch, progress: inline, declared with their documentation)
              Then the INLINE INTERNALS (not API: what the inline calls compile from):
              ---- arbiter: the pending queue, ---- arbiter: out-of-line API, ---- arbiter: inline API,
              ---- internal types the inline fast paths touch (the context and endpoint structs),
              ---- private prototypes, ---- rcache: internals, ---- rcache: inline definitions,
              ---- profile: private, ---- inline fast paths: the definitions
     rdmax_impl.h, one implementation file (one include block, one extern "C"), then its sections
              in this order, each opened by a "---- >>tag: topic ----" banner (search for the tag):
              >>strings      status and operation names
              >>alloc        rdmax's own allocations (RDMAX_MALLOC/RDMAX_FREE, the context's allocator)
              >>log          logging: levels, the thread's last error, log items, repeats summarised
              >>numa         NUMA placement of rdmax's buffers
              >>context      the context: device and GID, the shared device, queues, create and destroy, wait
              >>memory       memory registration, and the context's registration cache
              >>wire         the connection record: its format, and its exchange over a socket
              >>ud           UD endpoints: the shared QP, address handles, datagram order
              >>mcast        UD multicast: joins through rdma_cm or the direct attach, leaving
              >>arbiter      the arbiter's out-of-line paths (the pending queue's scheduler)
              >>rcache_index registration cache: the radix page table, region slots, the LRU
              >>memhooks     registration cache: the event ring, the opt-in memory hooks, the malloc policy
              >>monitor      registration cache: the userfaultfd monitor
              >>invalidation registration cache: invalidation, and draining the event ring
              >>rcache       registration cache: a region's life cycle, get and put, create and destroy
              >>srq          receive pools: buffers, chunks, each endpoint's receive queue, the QP-number map
              >>pools        a pool's life: sizing, receive CQs (groups), join and release, give-back, the tick
              >>windows      exposed memory: an endpoint's QP rights and its memory windows
              >>ep           endpoint life cycle: desc defaults, create, connect, flush, destroy
              >>ep_query     an endpoint's regions and queries
              >>post         the operations' slow and general paths, the fast paths' out-of-line ends
              >>batch        batching: the chain, the post list's room, rdmax_batch_begin/end
              >>sendcq       send completions: retirement, error completions, an endpoint's failure
              >>recv         the receive path and credits: receive completions, repost, grants
              >>health       device events, watchdog, keepalive, disconnect
              >>pending      the pending queue: requests that wait for room
              >>admit        admission by a shared secret: SHA-256, HMAC, the proofs
              >>oob          connection setup over TCP: listener, handshakes, accept, connect
              >>cm           connection setup through rdma_cm: channel and events, route checks, the QP to RTS
              >>cm_listen    rdma_cm: the listener and rdmax_accept
              >>cm_connect   rdma_cm: the client's rdmax_connect
              >>profile      profiling: variables, port counters, profile objects, events, points
              >>testing      hooks for rdmax's own tests

   TRANSPORT SELECTION
   Define RDMAX_TRANSPORT_RC, RDMAX_TRANSPORT_UD or both before including. With neither the header stops
   with #error. Code of a transport that was not selected is not compiled, so a fast path never pays for it.
   Every translation unit must select the same transports as the implementation: a unit that selects
   differently fails at link time with an undefined reference to `rdmax__selection_rcX_udY` (the symbol
   names what that unit selected). Linking with --gc-sections may hide this check.

   OPTIONAL DEFINES (before including; the same in every unit)
       RDMAX_IMPLEMENTATION      compile the implementation (exactly one unit)
       RDMAX_MALLOC(sz) / RDMAX_FREE(p)
                                 allocator for rdmax's own small structs; define both or neither.
                                 A runtime allocator in rdmax_ctx_desc.allocator takes precedence,
                                 for every part (the context's registration cache too; a cache of
                                 your own: rdmax_rcache_desc.allocator)
       RDMAX_ASSERT(c)           debug checks on the fast paths (default: assert() when !NDEBUG)
       RDMAX_BATCH_MAX           most work requests chained into one post (default 32)
       RDMAX_MAX_SGE             most scatter/gather entries rdmax puts in one request (default 8)
       RDMAX_MEMHOOKS            opt-in (default off): the implementation unit defines mmap, mmap64,
                                 munmap, mremap, madvise, shmat, shmdt, brk and sbrk, so every call to them
                                 through the PLT records the range for the registration cache. Costs: the
                                 program's libc names are replaced (clashes with other interposers and
                                 with -static), each call pays a ring record and a fence; calls inside
                                 glibc and direct system calls stay unseen (hence RDMAX_MALLOPT)
       RDMAX_MALLOPT             opt-in (default off; needs RDMAX_MEMHOOKS): a constructor sets glibc's
                                 malloc policy at program start (M_MMAP_MAX=0, M_TRIM_THRESHOLD=-1,
                                 M_ARENA_MAX=1) and malloc_trim becomes a no-op, so glibc never gives
                                 memory back from inside libc where no hook sees it. Costs: the heap keeps
                                 its peak size for the life of the process, large blocks come from the
                                 heap instead of mmap, all threads share one malloc arena
       RDMAX_NO_MEMHOOKS, RDMAX_NO_MALLOPT
                                 removed in 0.2.0 (what they asked for is the default): #error, drop them
       RDMAX_PROFILE             compile the profile points (timed sections; see rdmax_profile_print)
       RDMAX_LOG_REPEAT_MS       how often a repeated log message is summarised (default 10000)
       RDMAX_TESTING             rdmax's own tests only (in the implementation unit): compiles the
                                 rdmax__test_* hooks (rdmax_impl.h >>testing) that force internal states
                                 no public call reaches; not API

   ENVIRONMENT (read by rdmax_ctx_create; a desc field set by the program wins over the variable)
       RDMAX_DEVICE=name         device to open (default: first device with an active port)
       RDMAX_GID_INDEX=n         GID index (default: the RoCE v2 IPv4-mapped GID, else index 0)
       RDMAX_NUMA_NODE=n         NUMA node for rdmax's buffers (default: the device's node, if known)
       RDMAX_SL=n                service level of every connection, 0..15 (default 0)
       RDMAX_PKEY_INDEX=n        P_Key table index of every QP (default 0)
       RDMAX_MCAST_JOIN=cm|attach  how UD multicast groups are joined (default cm; see UD AND MULTICAST)
       RDMAX_LOG_LEVEL=error|warn|info|debug|trace   (default: warn)
       RDMAX_RCACHE_MONITOR=off  no memory monitor in this process (raw buffers then registered per
                                 operation, see REGISTRATION CACHE)
       RDMAX_SECRET=text         the shared secret of ADMISSION (its bytes), when rdmax_ctx_desc.secret
                                 is NULL; empty or unset: none

   STEP BY STEP
       rdmax_ctx_desc cd = {0};                 zero fields mean the documented defaults
       rdmax_ctx *ctx;  rdmax_ctx_create(&cd, &ctx);
       rdmax_ep_desc ed = {0};  ed.recv_cb = on_message;
       server: rdmax_listener_create(ctx, NULL, 18515, &l);  rdmax_accept(l, &ed, &ep, 10000);
       client: rdmax_connect(ctx, "host", 18515, &ed, &ep, 10000);
       (cd.conn_setup = RDMAX_SETUP_CM: the same three calls set up through rdma_cm; see CONNECTION SETUP)
       one process: rdmax_ep_create_pair(ctx, &ed, &a, &b);
       ed.expose / ed.expose_list: regions the peer may access, through this endpoint only and while it is
       connected (EXPOSED MEMORY); it reads them with rdmax_ep_query_remote(ep, i)
       a put with a registered buffer (the peer exposed a region registered with RDMAX_ACCESS_REMOTE_WRITE):
           rdmax_mem *m;  rdmax_mem_alloc(ctx, 4096, RDMAX_ACCESS_LOCAL, &m);     (or rdmax_mem_reg)
           const rdmax_rbuf *r = rdmax_ep_query_remote(ep, 0);     NULL: the peer exposed nothing
           rdmax_comp c = {0};
           if (rdmax_put(ep, m->addr, len, m, r->addr, r->rkey, &c) == RDMAX_INPROGRESS)
               while (!c.done) rdmax_progress(ctx);          then c.status
       rdmax_send(ep, buf, len, mem, NULL);  rdmax_get(...);  mem NULL: raw buffer, see REGISTRATION CACHE
       many small puts in one post: rdmax_put_list(ep, reqs, n, &done), or rdmax_batch_begin(ep), the
       calls, rdmax_batch_end(ep)
       while (...) rdmax_progress(ctx);         drives completions and received messages
       rdmax_ep_flush(ep, 1000);  rdmax_ep_destroy(ep);  rdmax_ctx_destroy(ctx);
       applied settings and state: rdmax_ctx_query_desc, rdmax_ep_query_desc, rdmax_ep_query_state,
       rdmax_ep_query_resources, rdmax_ctx_query_attr, rdmax_ctx_query_counters

   FAST-PATH RULES
   rdmax_send/put/put_list/get/fadd/cswap and rdmax_progress never allocate, never log and take no lock.
   Results:
       RDMAX_OK                 done, and only without a comp: the data went inline (copied at the call),
                                the buffer may be reused now. Also rdmax_get of 0 bytes without a comp.
       RDMAX_INPROGRESS         posted; comp (if given) reports the result later, from rdmax_progress
       RDMAX_ERR_NO_RESOURCE    nothing was posted (send queue, CQ, credits or read budget full):
                                progress and retry, or queue it (rdmax_req_post)
       other negative values    nothing was posted and comp is not used; rdmax_status_str() names why
   THE COMPLETION CONTRACT: an operation given a comp reports through it, always, whether its data went
   inline or not: it returns RDMAX_INPROGRESS (the post is then signaled) or a negative status (nothing
   posted, comp untouched). So this never spins forever:
       rdmax_comp comp = {0};
       if (rdmax_put(ep, buf, len, NULL, raddr, rkey, &comp) == RDMAX_INPROGRESS)
           while (!comp.done) rdmax_progress(ctx);
   Without a comp an operation is unsignaled: RDMAX_OK (inline) or RDMAX_INPROGRESS, and only
   rdmax_ep_flush() tells when it is done. Keep a buffer unchanged until its comp completes (or the
   flush returns), unless the call returned RDMAX_OK.

   COMPLETION OBJECTS
   An rdmax_comp is a callback (comp->cb set: called with the status) or a flag you poll (cb NULL: rdmax
   sets comp->done = 1, and comp->status holds the result from then on; rdmax may write the status
   earlier, once the operation is accepted). Set cb (or leave it NULL) before the call that takes the
   comp, and leave it so until the comp completes: which of the two it is, is read at the post. It must
   stay valid until it completes. rdmax sets done but never clears it: reset it (comp.done = 0, or zero
   the struct) before reusing the object. Completions
   arrive from rdmax_progress (and rdmax_wait, rdmax_ep_flush, which call it), and also from
   rdmax_ep_destroy and rdmax_ep_pending_purge (RDMAX_ERR_CANCELED), from a chained post that failed
   (RDMAX_ERR_IO, see rdmax_batch_begin), and from a connect call of an endpoint that exposes regions (it
   polls send completions while its memory windows bind: EXPOSED MEMORY). A comp callback may post new
   operations and call rdmax_progress (no send completion is reported inside it: they wait until the batch
   it belongs to is done, as RC retires in order; rdmax_ep_flush there is refused with
   RDMAX_ERR_INVALID_PARAM); it must not destroy the endpoint of the operation it reports (the completion
   loop still walks that endpoint).
   A receive callback (rdmax_ep_desc.recv_cb) may post, and may destroy its own endpoint: the receive
   loop checks for that before it touches the endpoint again. Its data is valid only during the call,
   and until the call returns even if it destroyed the endpoint.
   rdmax_wait(ctx, timeout_ms) blocks on the completion channel until a completion arrives or timeout_ms
   passes (-1: forever), progresses, and returns RDMAX_OK (completions were handled), RDMAX_ERR_TIMEOUT
   (nothing within timeout_ms) or RDMAX_ERR_IO (the CQs could not be armed).

   FABRICS AND DEVICE CAPABILITIES
   InfiniBand, RoCE v1 and RoCE v2 ports are addressed as each needs: the connection record carries the
   port's LID, link layer, GID type and subnet prefix; on InfiniBand a connection and a UD address handle
   go to the peer's LID, with a GRH only when the peer's subnet prefix differs from ours or
   rdmax_ctx_desc.force_grh asks; RoCE always routes by the GID (a GRH). Peers on different link layers,
   or RoCE v1 against v2, are refused at connect with RDMAX_ERR_OOB_LINK. The path MTU is the lower of
   the two ports' active MTUs; SL and P_Key index come from the ctx desc (RDMAX_SL, RDMAX_PKEY_INDEX).
   rdmax_ctx_create logs one info line (item DEVICE_CAPS) with what the device lacks and what rdmax does:
   no atomics (atomic_cap NONE): rdmax_fadd / rdmax_cswap return RDMAX_ERR_UNSUPPORTED, nothing posted;
   no shared receive queues: nothing changes (rdmax uses none: RECEIVING);
   no inline data: nothing is sent inline (ep desc max_inline = RDMAX_OFF does the same on any device); one
   SGE: the _iov calls take one entry; a cq_depth or sq_depth above the device's max_cqe or max_qp_wr is
   clamped, with one info line (item DEVICE_CAPS). With atomic_cap HCA
   (rxe, most NICs) RDMA atomics are atomic among themselves only: a CPU store to the same word, or a
   CPU read-modify-write, may interleave with them; use only RDMA atomics on such a word (GLOB devices
   also order them with the CPU's). iWARP devices are refused (RDMAX_ERR_UNSUPPORTED) with a sentence:
   rdmax's RC credits ride in immediate data and it uses UD, neither of which iWARP has. Only rxe
   (RoCE v2) has run rdmax; the rest is checked on a fake device (tests/fabric_test.c).

   ORDERING AND DELIVERY (RC)
   Operations of one endpoint are executed at the peer in the order they were posted, and their
   completions are reported in that order. So when the peer receives a send, the puts posted before it
   are in place in its memory, and a get posted after a put reads what the put wrote. A put, send or
   atomic posted after a get or atomic may run before the get's data has landed in your buffer: wait
   for the get's comp before sending what it read. Different endpoints have no order between them.
   Delivery is at least once, not exactly once: an operation reported failed (RDMAX_ERR_RETRY_EXCEEDED,
   RDMAX_ERR_FLUSHED, ...) may still have reached the peer (its acknowledgement was lost, or it was on the
   wire when the endpoint failed; a link-cut run saw 127 such sends), so a retry may deliver it twice.
   Give messages ids when that matters. UD keeps neither order nor delivery: a datagram may be lost.

   CONNECTING
   rdmax_connect: timeout_ms covers everything (TCP connect with retries, record exchange, ready byte);
   it returns once the server's rdmax_accept call that returns the peer's endpoint has run.
   rdmax_accept: timeout_ms is only the wait; each client's handshake has its own deadline
   (rdmax_ctx_desc.handshake_ms), see rdmax_accept.

   PENDING QUEUE
   An operation that finds no room (send queue, CQ, credits, read budget) returns RDMAX_ERR_NO_RESOURCE
   and posts nothing. To have it wait instead, hand it over as an rdmax_req: rdmax_req_post (the request
   names the operation; posted now or queued) or rdmax_ep_pending_add (your callback posts). Each
   endpoint's requests wait in its own FIFO group; rdmax_progress serves the groups with work round-robin,
   one request per group per turn, as completions return resources, so one busy endpoint cannot starve
   the others. While requests wait, direct posts on that endpoint are refused (order holds). When the
   endpoint fails or closes, its waiting requests complete in order with an error (RDMAX_ERR_ENDPOINT
   when it failed).
   Who is served next: the endpoint after the one served last; one that gets work joins the end of the
   round. An endpoint out of its own room (send queue, credits, read budget) leaves the round until a
   completion gives it back. When the context's send CQ is full, serving stops and starts again with
   that same endpoint, so it loses no turn. A credit grant that cannot go at once waits at the head of
   its endpoint's queue, before that endpoint's requests (a send waiting for credits from a peer that
   waits for ours would deadlock both), but takes no other endpoint's turn. tests/arbiter_test checks
   the round, the restart after a full CQ and the head push; pending_test the whole on rxe.
   rdmax_ep_query_resources(ep, &i).pending counts them; rdmax_ep_pending_purge cancels them.

   UD AND MULTICAST (RDMAX_TRANSPORT_UD)
   A UD endpoint is an address (peer GID, QPN, Q_Key) on the context's one UD QP: thousands cost no
   QP each. Connect it like RC (records or rdmax_connect); send only, 0 bytes (delivered with len 0, also
   between endpoints of one context: verified on rxe) up to the path MTU, unordered and unreliable
   (rdmax counts datagrams lost, late and duplicated: profile ud.skipped, ud.late, ud.duplicates).
   A datagram reaches an endpoint only from that endpoint's peer: the sender's QPN and
   source GID (from the GRH; on RoCE v2 over IPv4 the source IPv4 address) must be the peer's, since a
   QPN is only unique per device; others are dropped and counted (profile ud.wrong_source, also in
   recv_drops). Verified on rxe (tests/ud_test cross): a sender on another device that made a QP with
   the peer's QPN, and a real peer naming another endpoint, get nothing delivered. It trusts the
   network's source addresses: a host that takes the peer's IP address is not told apart.
   Multicast: rdmax_mcast_join(ep, "239.1.2.3") makes ep receive the IPv4 group (a group's datagrams go
   to the endpoint that joined, from any sender); rdmax_mcast_ep_create makes an endpoint that sends to
   the group; rdmax_mcast_leave leaves, and so does rdmax_ep_destroy.
   By default (mcast_join RDMAX_MCAST_CM) a join goes through rdma_cm, on InfiniBand and RoCE alike:
   rdma_join_multicast from the port's IPv4 address (rdmax_ctx_desc.mcast_addr, else derived), which asks
   the subnet manager on InfiniBand and joins at the IP level on RoCE; the MGID, MLID, Q_Key and address
   handle are the ones its event gives, and the context's UD QP is attached to that MGID/MLID. The join
   waits at most 10 s for the event. A port whose netdev has no IPv4 address that rdma_cm binds to the
   device fails the join with RDMAX_ERR_NO_DEVICE; an error event with RDMAX_ERR_IO, no answer (no subnet
   manager) with RDMAX_ERR_TIMEOUT; a group whose Q_Key is not the UD QP's (RDMAX_UD_QKEY, rdma_cm's)
   cannot be received (RDMAX_ERR_UNSUPPORTED), only sent to. Each with a sentence (item MCAST).
   mcast_join RDMAX_MCAST_ATTACH (or RDMAX_MCAST_JOIN=attach) attaches the QP to the group's IPv4-mapped
   GID directly and joins at the IP level through a socket: RoCE v2 with an IPv4-mapped GID only,
   refused on InfiniBand (no subnet manager would be asked). An error event rdma_cm sends after the
   join (the group lost, the address gone) is not watched. Both ways run on rxe (tests/ud_test, also
   across two hosts); InfiniBand's choice and refusals on the fake device (tests/fabric_test).

   RECEIVING (RC): SHARED RECEIVE POOLS AND CREDITS
   A context's RC endpoints receive buffers of shared pools, one per buffer size in use (ep desc
   recv_size, default the context's recv_size, 4096), each endpoint on a receive queue of its own that
   holds exactly the buffers backing its peer's credits; rdmax_progress posts them back (in batches; a
   poll that finds one message posts its buffer back at once), so an endpoint costs no buffers beyond
   what it grants. Each endpoint gives its peer a
   window: the peer may have that many sends and puts with immediate data outstanding; the next one is
   refused with RDMAX_ERR_NO_RESOURCE (or waits, as an rdmax_req) until credits come back.
   rdmax_ep_query_resources says how many may go now (send_credits) and the window this endpoint gives
   its peer (recv_window). A window W is backed by W + 1 buffers: the one more takes the sender's
   credit grants and goodbye (each a zero-length send that consumes a buffer), so they never wait for
   the window. The pool holds the sum of all endpoints' W + 1, and a consumed buffer is posted again on
   its endpoint's queue before its credit goes back, so a sender that keeps to its window never meets
   receiver-not-ready (RNR), whatever other peers do; rdmax_ctx_query_recv_pool shows a pool's buffers,
   how many are posted and the credits it backs (target). Credits return in the
   immediate data of the receiver's sends, or in a grant sent from the receive path as soon as half a
   window is owed, however busy the receiver is: a refused post waits a few round trips, not for the
   receiver to go idle.
   Windows adapt (ep desc rq_depth 0, the default): a window starts at 2 and doubles, up to ep desc
   max_window (default 64), each time a grant to a streaming peer falls due (it sent half its window,
   its grants not counted, and nothing of the receiver's carried the credits back). The new credits go
   out only once buffers back them: when the pool has none free, or the receive CQ no room,
   the growth waits (counted in grant_waits, profile event GRANT_WAIT) and rdmax_progress's tick adds a
   chunk of buffers and room, up to the device's bounds (detail 1 of the event: at the bound).
   It shrinks back to 2 while the receiver's own posts (replies) carry the credits back and the peer
   uses at most a quarter of it: the receiver keeps back the credits it owes instead of returning them,
   and the pool's target with them (as when endpoints go). A pool more than a chunk above its target
   gives memory back: the tick lets its newest chunks drain (their buffers are not posted again as they
   come back from a receive, while the pool keeps its target posted without them) and deregisters and
   frees a chunk once all its buffers are home (recv_pool.chunks_freed); a receive queue cannot hand back
   what it holds posted, so this needs traffic through the queues. The receive CQ shrinks with the
   credits too, where the provider allows it.
   A peer that goes idle keeps what it holds (at most max_window + 1 buffers); one that streams one way
   keeps a grown window while it streams.
   Nothing changes on the wire: a sender adds whatever credits come back, so older peers interoperate.
   A non-zero rq_depth is a fixed window (at least 4, at most 65534), as before; with max_window above
   it, the window adapts between the two. An endpoint on a pool of its own (below) has a fixed window
   (default 16).
   A peer that sends past its window (not rdmax, or broken) finds its own receive queue empty: its sends
   meet RNR on its QP (and fail there once its rnr_retry runs out), and nothing of another endpoint's
   buffers, credits or receive CQ room is within its reach. And it is failed: when a grant to it falls
   due and it has sent more than the buffers given to it (its window + 1 and every credit returned so
   far, the credits of growth included), its endpoint goes to RDMAX_EP_ERROR with RDMAX_ERR_PEER_WINDOW
   (counted in window_breaks) and its QP leaves RTS; an honest peer never is. (tests/srq_test breakers:
   four such peers beside an honest client that counts no RNR.)
   Memory: the pool costs (W + 1) x recv_size per endpoint: 12 KiB at rest with the defaults (3 x 4 KiB),
   up to 260 KiB while its window is 64; rdmax's own state is 2 KiB per endpoint (the batch staging is
   the context's), and the provider's queues grow with sq_depth, max_inline and max_window (on rxe with
   the defaults about 20 KiB of send queue, rxe giving n requests the power of two above n slots, 32 of
   512 B for the default 31, sq_depth 32 would take 64, 36 KiB; and about 12 KiB of receive queue for
   max_window + 1 = 65 requests, 5 KiB at max_window 16 or less): 10,000 endpoints with the default
   descriptors took 46 KiB of RSS each on rxe (tests/scale_test tenk). A receive CQ holds every credit
   of the endpoints on it, so one holds at most max_cqe (32767 on rxe) / 3 endpoints at rest (about
   10,900, fewer as windows grow; with fixed windows max_cqe / (rq_depth + 1): 1927 at 16). When the
   next endpoint would pass it, the context
   opens another receive CQ on the same completion channel, with a pool of its own, and
   the endpoint goes there (rdmax_recv_pool_info.groups counts them; a context has 32 pools, one per
   receive size and receive CQ): endpoints per context are bounded by the device's max_qp and memory,
   not by one CQ. rdmax_progress polls them all, a different one first each call. Endpoints with a
   receive pool of their own stay on the first receive CQ.
   A receive pool of its own: ep desc recv_pool = RDMAX_RECV_POOL_OWN gives one endpoint rq_depth + 1
   buffers of recv_size of its own memory (registered once, reposted in batches of at most half the
   window), with a fixed window and no RNR; it costs (rq_depth + 1) x recv_size of rdmax's own memory
   per endpoint (in profile endpoint_bytes). The default stays the shared pool.

   EXPOSED MEMORY (RC)
   A region exposed on an endpoint (ep desc expose / expose_list, registered with RDMAX_ACCESS_REMOTE_*)
   is reachable by one peer only: the one connected to that endpoint, through that endpoint's QP, with
   the rights the region was registered with and the rkey rdmax_ep_query_remote gives it (a key of that
   endpoint's own: a memory window bound to its QP). From: the return of the call that connects the
   endpoint (rdmax_connect, rdmax_accept, rdmax_ep_connect_record), which binds the windows and waits for
   them before the peer can learn it is connected (before the ready byte; with rdma_cm before
   rdma_accept and the client's RTU). Until: the endpoint closes (rdmax_ep_disconnect; the peer's
   goodbye once rdmax_progress takes it), fails or is destroyed: its QP leaves RTS before the call or
   callback that reports it returns, and rdmax_ep_destroy frees the windows. Anything else is refused at
   the peer with a remote access error: another connection (even of the same peer process) with a key
   that leaked, an access after the close. The region has no remote key of its own (mem->rkey is 0), so
   it is never open to the whole context. Cost per connect, per exposed region: a window made at endpoint
   creation, a bind posted and waited for (counted as RDMAX_OP_BIND), freed at destroy; operations cost
   the same.
   RDMAX_ACCESS_ANY_ENDPOINT (with remote rights) is the other way, for keys you hand to peers yourself (in
   a message, for many endpoints): the region is a plain registration and mem->rkey opens it with its
   rights through every endpoint of the context and its family (any QP of the protection domain), from
   rdmax_mem_reg until rdmax_mem_free, whatever closes; exposing it advertises mem->rkey. Regions of the
   registration cache asked for remote rights are plain registrations too.
   An RC QP takes remote writes always (rdmax's keepalive and flush marker are zero-length writes, which
   touch no memory), and remote reads and atomics only when a region exposed on it grants them, or a
   region open on every endpoint that grants them was registered before the endpoint was made.
   A device without type-2 memory windows (rdmax_ctx_query_attr(ctx)->mem_windows 0; logged once, item
   MEM_WINDOW) has only plain registrations: every region is as with RDMAX_ACCESS_ANY_ENDPOINT.
   An endpoint that exposes regions cannot be connected inside a comp callback (RDMAX_ERR_INVALID_PARAM).

   REPLYING TO A REQUEST (RC)
   A reply that lands in the requester's memory (a region it exposed, registered with
   RDMAX_ACCESS_REMOTE_WRITE, at the address and key rdmax_ep_query_remote gives the responder; the request
   can say where in it) goes one of two ways. rdmax_put_imm is one operation and one credit: the data lands
   in place and the requester's imm_cb (it needs one, or the notice is only counted as a drop) gets imm and
   len, so imm names the request (its 32 bits are all the notice carries). rdmax_put then rdmax_send is two
   operations and the same one credit (a put takes none): the send can carry a larger header (up to the
   requester's recv_size), which reaches recv_cb copied into a receive buffer. Either way the requester's
   callback runs after the reply's data is in place, since one endpoint's operations run in order (ORDERING
   AND DELIVERY). rdmax_put_imm always takes the general path; a short put and a short send without a comp
   take the fast paths. A send also returns, in its immediate data, the credits its sender owes for the
   requests it received; a put_imm's immediate is yours, so a responder that replies only with rdmax_put_imm
   returns them in grants (a zero-length send each half window) instead.

   LIMITS
   An endpoint past a limit fails with RDMAX_ERR_LIMIT and a log line that names the limit and its value
   (rdmax_ctx_desc.max_eps, the device's max_qp or max_cqe, RLIMIT_MEMLOCK for the pool, 32
   receive sizes in use at once); nothing of it remains (buffers already registered stay in the pool for
   the next endpoint).

   THREAD SAFETY
   A context and everything made from it belong to one thread at a time. Different contexts may be used
   from different threads concurrently. rdmax_status_str(), rdmax_log_item_str() and the pure wire-format
   functions are thread-safe; rdmax_ctx_query_last_error(NULL) is per thread.
   THREADS AND SHARED REGISTRATIONS: a context made with rdmax_ctx_desc.parent = another context shares
   its device and protection domain, so a region registered in either (rdmax_mem_reg / rdmax_mem_alloc)
   works with its lkey on the endpoints of both, and either's endpoints may expose it (its own rkey, with
   RDMAX_ACCESS_ANY_ENDPOINT, also works on both): give each thread its own context, all children
   of one, and serve one registered region from every thread. Create a child on the parent's thread (or
   while the parent is not in use); after that each context is used by its own thread only, and device
   events are shared out between them by rdmax. Each context keeps its own CQs, endpoints, receive queues
   and registration cache. The device closes with the last of them, so a parent may go before its
   children; free a region before the context it was registered with.

   ERROR HANDLING
   Functions that can fail return an rdmax_status (RDMAX_OK 0, RDMAX_INPROGRESS 1, RDMAX_BUSY 2, errors
   negative; rdmax_status_str() gives each a sentence), the registration cache's too (see REGISTRATION
   CACHE). Counts and handles are returned as such (rdmax_progress: completions handled); a count that
   can fail (rdmax_rcache_invalidate, _drain) is >= 0, or a negative rdmax_status.
   Every message rdmax logs is a log item (RDMAX_LOG_ITEM_*, one X-macro list) with a text that names the
   device, port, endpoint and call; the logger gets both. Setup failures are logged once, at
   RDMAX_LOG_ERROR, through the logger (default: one line on stderr), and kept:
   rdmax_ctx_query_last_error(ctx) and rdmax_ctx_query_last_error_item(ctx); with ctx NULL the calling
   thread's last error, which outlives a failed rdmax_ctx_create. Print the status, not the kept text, if
   the logger already printed it.
   A failed completion moves only its own endpoint to RDMAX_EP_ERROR; its first error is logged once
   (RDMAX_LOG_ITEM_EP_FAILED) with the ibv_wc_status text, the operation and, for a signaled one (given a
   comp, or one in signal_interval), its length and remote address (the fast path keeps them only for
   those that report); flushed completions after it are counted, not logged, and complete their
   operations with RDMAX_ERR_FLUSHED.
   Identical messages in a row are printed once, then summarised (RDMAX_LOG_ITEM_LOG_REPEATED).

   LOGGING
   rdmax_ctx_desc.logger.func receives every message (level, RDMAX_LOG_ITEM_* id, text, logger.user); zero
   means one line on stderr. rdmax_ctx_desc.log_level (with log_level_set) or RDMAX_LOG_LEVEL chooses how
   much (default warn). The fast paths never log.

   FAILURES, WATCHDOG, KEEPALIVE, DISCONNECT
   No endpoint outlives its QP in silence. An endpoint moves to RDMAX_EP_ERROR, with a reason that
   rdmax_ep_query_error() returns and the log names (endpoint, out-of-band peer, RoCE peer GID and QPN, and
   "the link is down" when the port is), on the first of:
       an error completion                  its status (RDMAX_ERR_RETRY_EXCEEDED, _REMOTE_ACCESS, ...)
       a flushed completion with no error   RDMAX_ERR_FLUSHED: the QP went to the error state behind
         completion of its own              rdmax's back (an async error, the responder side of an error
                                            the peer caused, ibv_modify_qp by someone else)
       an async QP or device fatal event    RDMAX_ERR_DEVICE
       the watchdog (RC)                    RDMAX_ERR_STALLED: signaled operations outstanding and none
                                            completed for ep_desc.watchdog_ms (default 2 x the RC retry
                                            time + 2 s; on rxe a cut link can stop retransmission for good)
       the peer sent past its window (RC)   RDMAX_ERR_PEER_WINDOW (see RECEIVING)
       rdma_cm's DISCONNECTED, no goodbye   RDMAX_ERR_PEER_GONE (RDMAX_SETUP_CM)
   Then the QP is moved to the error state, so every outstanding operation completes exactly once, with an
   error, and rdmax_ep_flush() never returns RDMAX_OK over an operation that was flushed or failed.
   RDMAX_EP_ERROR is the end of an endpoint: it never connects again. New posts return
   RDMAX_ERR_ENDPOINT, requests waiting in its pending queue complete in order with RDMAX_ERR_ENDPOINT,
   and what was posted completes with its error; destroy it and connect a new one.
   The RC retry time, how long a link cut an endpoint survives, is 4.096 us x 2^ep_desc.timeout x
   (ep_desc.retry_cnt + 1): 7.5 s with the defaults (timeout 18, retry_cnt 6), as UCX's 1 s x 7 tries; a
   shorter one fails healthy endpoints on a loaded link (timeout 14, 0.47 s: 94 to 101 of 128 endpoints
   of 8 clients on two hosts failed with RETRY_EXCEEDED within a second). So with the defaults a dead peer
   is found within 7.5 s while operations are outstanding (the watchdog's bound, 2 x 7.5 + 2 = 17 s, only
   where the device stops retransmitting), and within 4 + 7.5 = 11.5 s when the endpoint is idle or its
   requests wait for credits (keepalive). Lower timeout on a quiet fabric to find peers sooner.
   Keepalive (RC, ep_desc.keepalive_ms, default 4000, RDMAX_OFF to disable): an endpoint that posted
   nothing for that long sends one zero-length RDMA write, so a vanished peer is found within keepalive_ms
   + the RC retry time with no application traffic, also while requests wait in its pending queue for
   credits the peer will never return. Device events (port down/active, QP fatal, device fatal, CQ error,
   GID change) are read without blocking from the context's async fd. The watchdog, keepalives and device
   events run from rdmax_progress and rdmax_wait by elapsed time, not by the number of calls: the first
   call after a millisecond has passed runs them (at most once per step of the coarse clock, 1-4 ms, so a
   spinning caller makes no system call for them per round trip; the watchdog and keepalive pass at most
   once per 100 ms), however long the program spent between calls, in callbacks or elsewhere; rdmax_wait
   sleeps in slices of 100 ms. THE RULE: call rdmax_progress (or rdmax_wait) at least once per bound, and
   a dead peer is found within the bound plus the gap between two calls. A gap longer than an endpoint's
   watchdog bound (a program stopped in a debugger) restarts its watchdog clock. A program that drives
   neither gets none of it.
   rdmax_ep_disconnect() drains, tells the peer and leaves both sides RDMAX_EP_CLOSED (the peer's
   rdmax_ep_query_error() and posts return RDMAX_ERR_CLOSED, and its flush says "the peer disconnected"):
   a close is not a failure, and is distinct from one in the state and in the EP_CLOSED profile event.

   CONNECTION SETUP
   rdmax_listener_create/rdmax_accept/rdmax_connect set an endpoint up in one of two ways, chosen per
   context by rdmax_ctx_desc.conn_setup:
       RDMAX_SETUP_TCP (0)   rdmax's own record over TCP (rdmax_conn_record, RDMAX_CONN_RECORD_SIZE bytes)
       RDMAX_SETUP_CM        rdma_cm (librdmacm), RC only: the listener is an rdma_cm id, the client
                             resolves the address and the route (the source GID comes from the route; RoCE
                             v2 over IPv4 or IPv6) and sends a connect request. rdma_cm carries the QP
                             number, PSN, MTU and GID; the rest of the record (transport, credits, receive
                             size, exposed buffer) rides in the request's private data as a compact record
                             (RDMAX_CM_RECORD_SIZE bytes, rdmax_cm_record_encode), checked field by field
                             with the same statuses and sentences as the TCP record. A client whose record
                             is bad is rejected with the status in the reject's private data. Each rdma_cm
                             step of rdmax_connect is under its deadline and a timeout names the step
                             ("rdma_resolve_route timed out after 80 ms"). rdmax_listener_query_fd() is the
                             event channel's fd. rdmax_ep_disconnect() also calls rdma_disconnect(), and a
                             peer that disconnects is seen as RDMAX_EP_CLOSED, one that exits, is killed or
                             destroys its endpoint without a disconnect as RDMAX_EP_ERROR with
                             RDMAX_ERR_PEER_GONE (RDMA_CM_EVENT_DISCONNECTED with no goodbye before it, read
                             by rdmax_progress's slow tick), with no traffic needed. That verdict waits until
                             the receive CQs were drained after the event, so whatever the peer sent before
                             it, its goodbye too, is delivered first; after our own goodbye the peer's
                             DISCONNECTED completes the close (RDMAX_EP_CLOSED). rdmax creates its own
                             QP on the context's PD (the cm id has none), so everything else about an
                             endpoint is the same in both modes. ADMISSION
   With a shared secret (rdmax_ctx_desc.secret, or RDMAX_SECRET) a listener serves only clients that
   prove they know it, and a client connects only to a listener that proves it back; both sides need the
   same secret. A challenge-response with HMAC-SHA-256 (written in rdmax) and a fresh random nonce per
   connection; the secret never goes on the wire. Over TCP the listener checks the client's proof before
   it makes an endpoint: a client without the proof gets no QP and nothing else. Refused, both sides
   return RDMAX_ERR_OOB_AUTH (also a listener without a secret and a client with one), counted in
   auth_refused; the listener goes on serving. With RDMAX_SETUP_CM the proof rides in the connect
   request (there is no round trip before it): it is dated, and a listener refuses one dated more than
   60 s from its own clock (the hosts' clocks must agree within that) or seen before (it remembers the
   last 4096; past that, proofs not newer than the oldest it forgot are refused too).
   It protects against strangers connecting, against a recorded handshake replayed, and (the listener's
   proof) against an impostor listener; the proofs cover the records, so a man in the middle cannot swap
   the QP numbers, GIDs or rkeys in them. It does not encrypt anything: the fabric carries data and
   rkeys in the clear, and someone on the path can read them, and forge packets of a connection once it
   is made. It decides who connects, not what a connected peer may reach: that is the memory's rules
   (ed.expose and the access flags of its registration). Without a secret on either side the exchange is the
   same as before admission existed; an rdmax from before it refuses a peer with a secret as a newer
   version.

   REGISTRATION CACHE
   A buffer passed without an rdmax_mem ("raw") is registered through the context's cache, by its
   rcache_mode: RDMAX_RCACHE_AUTO (default) caches a range only while a memory monitor sees every change
   to it and registers anything else for the one operation (correct; a registration each);
   RDMAX_RCACHE_MANUAL caches every range and trusts the program to call rdmax_rcache_invalidate before
   the memory under it changes; RDMAX_RCACHE_UNCACHED never caches. rcache_disable refuses raw buffers.
   The monitor: userfaultfd with its UNMAP, REMOVE and REMAP events. The first context opens it (also as
   UFFD_USER_MODE_ONLY when vm.unprivileged_userfaultfd=0 and the process lacks CAP_SYS_PTRACE, then
   /dev/userfaultfd); the first cache starts one thread, "rdmax-monitor", all signals blocked, that
   lives as long as the process (an munmap of a registered mapping waits for it). A miss registers the
   whole private anonymous mapping holding the buffer, in write-protect mode with no page protected:
   nothing ever faults, and the kernel reports every munmap, mmap(MAP_FIXED), mremap, brk shrink and
   madvise(DONTNEED/FREE/REMOVE) of it, whoever makes the call: the program, glibc inside itself, a
   direct system call, a -static program. The thread claims a slot of a lock-free ring before each
   read and fills it after, and a get waits for a claimed slot, so a get that follows an munmap always
   sees it; the thread takes no lock and allocates nothing. Shared memory (memfd, tmpfs, SysV shm,
   MAP_SHARED|MAP_ANONYMOUS) and files are never cached: they can be truncated or punched with no event.
   Where userfaultfd cannot run (seccomp, an old kernel, RDMAX_RCACHE_MONITOR=off), the first context
   logs one warning and every raw buffer is registered per operation; rdmax_rcache_query_monitor says
   why. Side effects: the thread; a cached buffer's mapping stays registered (another userfaultfd in the
   process gets EBUSY on it); its munmap waits for the thread. After fork() the parent's cache keeps
   working; the child's mappings carry no registration and it has no monitor until it makes a cache.
   Why a userfaultfd monitor and not the hooks, with measurements: DESIGN NOTES.
   ROUTES (tests/rcache_device_test.c: after the change the receiver must get the new bytes; the control
   runs the route on a MANUAL cache, where the old registration's stale bytes arrive)
     route                                      monitor (default)         hooks+malloc policy   control
     free + malloc 16 KiB, malloc_trim          covered (REMOVE/UNMAP)    covered (pages kept)  stale
     free + malloc 1 MiB, 64 MiB (glibc's own   covered (UNMAP)           covered (pages kept)  stale
       munmap inside free)
     munmap + mmap MAP_FIXED; MAP_FIXED over    covered (UNMAP)           covered               stale
     mremap grow (moving), shrink, move         covered (REMAP, UNMAP)    covered               stale
     madvise DONTNEED, refill                   covered (REMOVE)          covered               stale
     madvise FREE (+PAGEOUT), refill            covered (REMOVE)          covered               none (1)
     shmdt + shmat                              never cached (shared)     covered               stale
     shmat(SHM_REMAP) over a cached range       NOT covered: stale (2)    covered               stale
     syscall(SYS_munmap) + syscall(SYS_mmap)    covered (UNMAP)           NOT covered: stale    stale
     munmap by another thread                   covered (UNMAP)           covered               stale
     file mapping replaced by another file's    never cached (file)       covered               stale
     memfd MAP_SHARED ftruncate 0 and back      never cached (shared)     NOT covered: stale    stale
     memfd MAP_SHARED fallocate PUNCH_HOLE      never cached (shared)     NOT covered: stale    stale
     the same routes in a -static program       covered                   cannot link           stale
     (1) 6.1 keeps pages a registration pins even on MADV_PAGEOUT: nothing goes stale to show; the test
         checks that the REMOVE event dropped the region. Older kernels could discard them.
     (2) the kernel replaces the private mapping with the segment and sends no UNMAP event (do_shmat
         maps with no userfaultfd list: 6.1, 6.12 and 6.18 alike); the registration goes with the old
         mapping. A region cached there hands out the old pages on a hit, which no system call checks.
         What a program must do: rdmax_rcache_invalidate(rdmax_ctx_query_rcache(ctx), addr, len) before
         shmat(SHM_REMAP) over memory it passed raw (or pass that memory with an rdmax_mem of its own).
         The address never stays unwatched: a miss in a watched mapping first checks (one ioctl) that
         the kernel still holds its registration; if not, every region cached in the old mapping is
         invalidated (rdmax_rcache_monitor_info.lost counts these) and what is mapped there now is
         looked up like a new mapping (the segment: shared, not cached; a later private mapping:
         watched). The check looks at the range's first and last page, so a replacement strictly inside
         a missed range goes unseen there.
   Not covered by either: another process changing memory this one maps shared (never cached by the
   monitor), an MR registered by the program itself (rdmax_mem_reg: the program owns it).
   ERRORS (the cache on its own: rdmax_rcache_create, _get, _invalidate, _drain): rdmax_status values,
   like the rest of rdmax. rdmax_rcache_get: RDMAX_ERR_INVALID_PARAM for a range that wraps or memory
   the reg op could not pin (its -EFAULT/-EINVAL), RDMAX_ERR_NO_MEMORY (bookkeeping, or the reg op's
   -ENOMEM), RDMAX_ERR_IO (any other reg op failure); a put, send or get of a raw buffer returns the
   same. The cache has no logger: it keeps its sentence, with the errno's text, as the calling
   thread's last error (rdmax_ctx_query_last_error(NULL), item RDMAX_LOG_ITEM_RCACHE_REG, _RCACHE_PARAM,
   _RCACHE_CREATE or _NO_MEMORY). rdmax_rcache_invalidate and _drain return a count, or
   RDMAX_ERR_INVALID_PARAM; rdmax_rcache_destroy the regions still referenced.

   DESIGN NOTES (why, with measurements; nothing here is needed to use rdmax)
   Registration cache: why the userfaultfd monitor (measured: bench/rcache_bench.c,
   tests/rcache_device_test.c; 2-core host, Linux 6.18; rxe in a TCG guest, Linux 6.1):
     - it covers every route in ROUTES but shmat(SHM_REMAP) (ROUTES note 2); the opt-in hooks + malloc
       policy miss three and cannot link -static;
     - a hit is the same code either way (5.6 ns monitor on and off; UCX's ucs_rcache 45 ns); a miss in
       a mapping already registered costs the cache's own 96-108 ns (no-op registration) plus one ioctl
       that checks the kernel still holds the registration (0.3 us on the host, 1.5 us in the guest;
       ROUTES note 2); the first miss in a new mapping adds 0.8 us (PROCMAP_QUERY, Linux 6.11+) or a
       read of /proc/self/maps before 6.11 (~0.45 us per mapping of the process: 244 us with 550);
     - per-operation registration (what is left without a monitor) costs ibv_reg_mr + ibv_dereg_mr:
       42 us (4 KiB) to 56 us (1 MiB) per operation on rxe in the guest;
     - the price: an munmap of a registered mapping waits for the monitor thread (two wakeups): 64 KiB,
       10.4 us against 6.9 us without rdmax (24 vs 35-63 us on a host loaded with other VMs); the hooks
       cost a ring record per call but change the whole program (embed_test shows the malloc policy);
     - on-demand-paging MRs would need no monitor, but rxe has no ODP on 6.1 and many devices lack it.
   Receiving, measured on rxe (tests/srq_test breakers): four peers keeping 256 sends in flight past a
   window of 16 beside an honest client (default rnr_retry) doing 200 checked round trips: on one shared
   receive queue (before receive queues per endpoint) the honest client's device counted 3 to 8 RNR in
   three runs, and in one its endpoint failed (RNR retries exceeded); with each endpoint's own queue it
   counts none, and the violators meet RNR on their own QPs (or fail for their window). The queues cost
   rxe 12 KiB per endpoint at max_window 64: tests/scale_test tenk, 10,000 endpoints with the default
   descriptors, 46 KiB of RSS each (34 KiB on one shared queue).
   An own pool saves no latency on rxe (send 8 B ping-pong, medians 11.25 us on the shared queue, 11.75 us
   on an own pool: bench/results/scale.md).

   LICENSE: see the end of this file.
*/
#ifndef RDMAX_H_INCLUDED
#define RDMAX_H_INCLUDED

/* The implementation uses POSIX and GNU calls (poll, getaddrinfo, mremap...): in that unit rdmax.h
   should come before any system header, or define _GNU_SOURCE yourself. */
#if defined(RDMAX_IMPLEMENTATION) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif

#define RDMAX_VERSION_MAJOR 0
#define RDMAX_VERSION_MINOR 2
#define RDMAX_VERSION_PATCH 0
#define RDMAX_VERSION_STRING "0.2.0"

/* ---- transport selection ------------------------------------------------------------------------ */
#if !defined(RDMAX_TRANSPORT_RC) && !defined(RDMAX_TRANSPORT_UD)
#error "rdmax: select a transport: #define RDMAX_TRANSPORT_RC and/or #define RDMAX_TRANSPORT_UD before #include \"rdmax.h\""
#endif
#if defined(RDMAX_TRANSPORT_RC)
#define RDMAX__HAS_RC 1
#else
#define RDMAX__HAS_RC 0
#endif
#if defined(RDMAX_TRANSPORT_UD)
#define RDMAX__HAS_UD 1
#else
#define RDMAX__HAS_UD 0
#endif
#if defined(RDMAX_MALLOC) != defined(RDMAX_FREE)
#error "rdmax: define both RDMAX_MALLOC and RDMAX_FREE, or neither"
#endif

/* Every unit that includes this header references the symbol that names its selection; only the
   implementation defines it (for its own selection). A mismatch is an undefined reference at link time.
   The reference sits in a non-allocated section: it costs nothing at run time. */
#define RDMAX__STR2(x) #x
#define RDMAX__STR(x) RDMAX__STR2(x)
#define RDMAX__SELNAME2(rc, ud) rdmax__selection_rc##rc##_ud##ud
#define RDMAX__SELNAME(rc, ud) RDMAX__SELNAME2(rc, ud)
#define RDMAX__SELECTION RDMAX__SELNAME(RDMAX__HAS_RC, RDMAX__HAS_UD)
__asm__(".pushsection .rdmax_selection,\"\",@progbits\n\t.quad " RDMAX__STR(RDMAX__SELECTION) "\n\t.popsection");

/* ---- includes and portability ------------------------------------------------------------------- */
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <string.h>
#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#ifndef RDMAX_API
#define RDMAX_API extern
#endif
#ifndef RDMAX_INLINE
#define RDMAX_INLINE static inline __attribute__((always_inline))
#endif
#define rdmax_likely(x) __builtin_expect(!!(x), 1)
#define rdmax_unlikely(x) __builtin_expect(!!(x), 0)
#ifdef __cplusplus
#define RDMAX_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define RDMAX_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif
#ifndef RDMAX_ASSERT
#include <assert.h>
#define RDMAX_ASSERT(c) assert(c)
#endif
#ifndef RDMAX_BATCH_MAX
#define RDMAX_BATCH_MAX 32
#endif
#ifndef RDMAX_MAX_SGE
#define RDMAX_MAX_SGE 8
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes ------------------------------------------------------------------------------- */
/* Grouped: 0 and positive are success; -1..-19 general; -20..-39 connection and wire format;
   -40..-59 completions. rdmax_status_str() gives each a sentence. */
#define RDMAX__STATUS_LIST(X)                                                                              \
    X(RDMAX_OK, 0, "success")                                                                              \
    X(RDMAX_INPROGRESS, 1, "operation posted; its completion will report the result")                      \
    X(RDMAX_BUSY, 2, "resources are available now: post directly instead of queueing")                    \
    X(RDMAX_ERR_NO_RESOURCE, -2, "no resources (send queue, completion queue or read budget full)")        \
    X(RDMAX_ERR_INVALID_PARAM, -3, "invalid parameter")                                                    \
    X(RDMAX_ERR_NO_MEMORY, -4, "out of memory")                                                            \
    X(RDMAX_ERR_NO_DEVICE, -5, "no usable RDMA device or port")                                            \
    X(RDMAX_ERR_IO, -6, "a verbs or system call failed")                                                   \
    X(RDMAX_ERR_SIZE, -7, "message size exceeds the limit")                                                \
    X(RDMAX_ERR_UNALIGNED, -8, "remote address of an atomic is not 8-byte aligned")                        \
    X(RDMAX_ERR_TIMEOUT, -9, "timed out")                                                                  \
    X(RDMAX_ERR_NOT_CONNECTED, -10, "endpoint is not connected")                                           \
    X(RDMAX_ERR_ENDPOINT, -11, "endpoint is in the error state")                                           \
    X(RDMAX_ERR_CANCELED, -12, "operation canceled (endpoint destroyed or pending queue purged)")           \
    X(RDMAX_ERR_NO_MEMH, -13, "buffer needs a memory registration (pass an rdmax_mem)")                   \
    X(RDMAX_ERR_UNSUPPORTED, -14, "operation not supported by this transport or device")                  \
    X(RDMAX_ERR_LIMIT, -15, "a device or process limit was reached (the log names the limit and its value)") \
    X(RDMAX_ERR_OOB_SHORT, -20, "connection record: peer closed before a whole record arrived")           \
    X(RDMAX_ERR_OOB_LONG, -21, "connection record: length field larger than this version's record")       \
    X(RDMAX_ERR_OOB_MAGIC, -22, "connection record: wrong magic (not an rdmax peer)")                      \
    X(RDMAX_ERR_OOB_VERSION, -23, "connection record: unsupported version")                                \
    X(RDMAX_ERR_OOB_LENGTH, -24, "connection record: length field smaller than the record")               \
    X(RDMAX_ERR_OOB_TRANSPORT, -25, "connection record: transport differs from ours")                      \
    X(RDMAX_ERR_OOB_MTU, -26, "connection record: invalid MTU")                                            \
    X(RDMAX_ERR_OOB_QPN, -27, "connection record: invalid QP number")                                      \
    X(RDMAX_ERR_OOB_PSN, -28, "connection record: invalid packet sequence number")                         \
    X(RDMAX_ERR_OOB_GID, -29, "connection record: invalid GID")                                            \
    X(RDMAX_ERR_OOB_BUFFER, -30, "connection record: invalid buffer address, key or length")               \
    X(RDMAX_ERR_OOB_CREDITS, -31, "connection record: invalid receive credits")                             \
    X(RDMAX_ERR_OOB_RECV_SIZE, -32, "connection record: invalid receive size")                             \
    X(RDMAX_ERR_OOB_SYNC, -33, "connection: peer did not confirm it is ready")                             \
    X(RDMAX_ERR_CONNECT, -34, "connection: could not reach the peer's out-of-band address")                \
    X(RDMAX_ERR_OOB_TIMEOUT, -35, "connection: a client's handshake did not finish within its deadline")   \
    X(RDMAX_ERR_OOB_LINK, -36, "connection record: link layer, LID or GID type invalid or unlike ours")     \
    X(RDMAX_ERR_REMOTE_ACCESS, -40, "remote access error (bad key, address or permissions)")              \
    X(RDMAX_ERR_REMOTE_OP, -41, "remote operation error (e.g. message larger than the receive buffer)")   \
    X(RDMAX_ERR_RETRY_EXCEEDED, -42, "transport retry count exceeded (peer unreachable or gone)")          \
    X(RDMAX_ERR_RNR_RETRY_EXCEEDED, -43, "receiver-not-ready retry count exceeded")                       \
    X(RDMAX_ERR_LOCAL, -44, "local protection, length or QP error")                                        \
    X(RDMAX_ERR_FLUSHED, -45, "flushed: the endpoint failed before this operation ran")                    \
    X(RDMAX_ERR_COMPLETION, -46, "the work completion reported another error")                            \
    X(RDMAX_ERR_STALLED, -47, "no completion within the endpoint's watchdog bound (link down or peer gone)") \
    X(RDMAX_ERR_CLOSED, -48, "endpoint closed: the peer disconnected, or this side did")                   \
    X(RDMAX_ERR_DEVICE, -49, "the device reported a fatal error")                                           \
    X(RDMAX_ERR_PEER_GONE, -50, "the peer's connection ended without its goodbye (killed, exited, or its endpoint destroyed without rdmax_ep_disconnect)") \
    X(RDMAX_ERR_PEER_WINDOW, -51, "the peer sent past its credit window (more messages than receive buffers given to it)") \
    X(RDMAX_ERR_OOB_AUTH, -52, "connection: the peer could not prove the shared secret (see ADMISSION)")

typedef enum rdmax_status {
#define RDMAX__X(name, val, text) name = val,
    RDMAX__STATUS_LIST(RDMAX__X)
#undef RDMAX__X
} rdmax_status;

/* ---- constants ---------------------------------------------------------------------------------- */
enum {
    RDMAX_ACCESS_LOCAL = 0,         /* local read/write only (receive and send buffers) */
    RDMAX_ACCESS_REMOTE_READ = 1,
    RDMAX_ACCESS_REMOTE_WRITE = 2,
    RDMAX_ACCESS_REMOTE_ATOMIC = 4,
    RDMAX_ACCESS_ANY_ENDPOINT = 16  /* with remote rights: the region's own mem->rkey opens it on every
                                       endpoint of the context (and its family), as a plain registration:
                                       for keys you hand to peers yourself (see EXPOSED MEMORY) */
};
#define RDMAX__ACCESS_LOCAL_WRITE 8u /* internal: the device writes into the buffer (a get's destination) */
typedef enum rdmax_log_level {
    RDMAX_LOG_ERROR = 0, RDMAX_LOG_WARN, RDMAX_LOG_INFO, RDMAX_LOG_DEBUG, RDMAX_LOG_TRACE
} rdmax_log_level;

/* Log items: every message rdmax logs is one of these, and the logger receives its id beside the text,
   so a program (or a test) tells errors apart by id, never by parsing text. rdmax_log_item_str() gives
   the sentence below; the message itself adds the device, endpoint, call and errno. */
#define RDMAX__LOG_ITEMS(X)                                                                                \
    X(NONE, "no message")                                                                                  \
    X(LOG_REPEATED, "the previous message repeated (a summary of a run of identical messages)")           \
    X(NO_DEVICE, "no RDMA device found")                                                                   \
    X(DEVICE_OPEN, "ibv_open_device failed")                                                               \
    X(DEVICE_QUERY, "ibv_query_device or ibv_query_port failed")                                          \
    X(PORT_INACTIVE, "a port is not active")                                                               \
    X(NO_ACTIVE_PORT, "no active port on the device asked for")                                           \
    X(CTX_DESC, "invalid context desc (conn_setup, rcache_mode, half an allocator)")                       \
    X(ENV_GID_INDEX, "RDMAX_GID_INDEX is not a GID index")                                                 \
    X(GID_QUERY, "ibv_query_gid failed (no such GID index?)")                                             \
    X(ENV_NUMA_NODE, "RDMAX_NUMA_NODE is not a node number")                                               \
    X(NUMA_UNAVAILABLE, "the NUMA node asked for is not available: allocating locally")                   \
    X(DEVICE_SETUP, "creating the protection domain, completion channel or CQs failed")                   \
    X(DEVICE_OPENED, "device opened (its limits)")                                                         \
    X(NO_MEMORY, "allocating rdmax's own memory failed")                                                   \
    X(RCACHE_CREATE, "creating the registration cache failed")                                             \
    X(RCACHE_MONITOR, "the registration cache's memory monitor: which one, or none and what that costs")   \
    X(RCACHE_REG, "the registration cache could not register a buffer")                                  \
    X(RCACHE_BUSY, "cached registrations were still in use when the context was destroyed")              \
    X(RCACHE_PARAM, "a registration cache call got an invalid argument (NULL, or a range that wraps)")   \
    X(MEM_REG, "ibv_reg_mr failed")                                                                        \
    X(MEM_ALLOC, "allocating registered memory on the NUMA node failed")                                  \
    X(AH_CREATE, "ibv_create_ah failed")                                                                   \
    X(UD_QP, "creating the context's UD QP failed")                                                        \
    X(MCAST, "a multicast join, attach, detach or leave failed, or was asked of the wrong endpoint")     \
    X(EP_SLOTS, "all endpoint slots of the context are in use (rdmax_ctx_desc.max_eps)")                   \
    X(EP_SETUP, "creating an endpoint failed (receive buffers, receive CQ, QP)")                           \
    X(QP_MODIFY, "ibv_modify_qp failed")                                                                   \
    X(EP_DESC, "invalid endpoint desc (transport not selected, regions to expose)")                       \
    X(PEER_TRANSPORT, "the peer's transport differs from ours")                                           \
    X(EP_CONNECTED, "endpoint connected")                                                                  \
    X(EP_FAILED, "an endpoint failed (error completion, watchdog, device or port event): first error only") \
    X(EP_CLOSED, "an endpoint was closed, by this side or the peer")                                       \
    X(NEGATIVE_TIMEOUT, "a negative timeout given to flush, accept or connect")                            \
    X(FLUSH_TIMEOUT, "rdmax_ep_flush timed out")                                                           \
    X(FLUSH_IN_CALLBACK, "rdmax_ep_flush called from a comp callback, where no send completion is reported") \
    X(DEVICE_EVENT, "a port went down or came up, or another asynchronous device event")                  \
    X(DEVICE_FATAL, "the device reported a fatal error: every endpoint fails")                            \
    X(LISTEN, "rdmax_listener_create failed (resolve, socket, bind, listen, rdma_cm), or its listener did")       \
    X(ACCEPT, "rdmax_accept: no client in time, or accept failed")                                        \
    X(CONNECT, "rdmax_connect: the peer's address cannot be resolved or reached")                         \
    X(CONNECT_RETRY, "rdmax_connect: refused or unreachable, tried again until the deadline")              \
    X(HANDSHAKE, "the connection exchange with a peer failed (record, or its ready byte)")               \
    X(HANDSHAKE_TIMEOUT, "a client's handshake did not finish within handshake_ms")                        \
    X(CM_SETUP, "rdma_cm setup failed (event channel, QP attributes)")                                     \
    X(PROFILE_MISUSE, "a profile call from an event callback, or an unknown event type")                  \
    X(LIMIT, "a device or process limit was reached (max_eps, max_qp, max_cqe, RLIMIT_MEMLOCK)")            \
    X(SRQ, "a receive pool: a refill of an endpoint's receive queue that failed")                          \
    X(MEM_WINDOW, "memory windows: none on the device (exposed regions open to every endpoint), or one failed") \
    X(DEVICE_CAPS, "what rdmax uses that the device lacks, and what rdmax does instead (once per context)")

typedef enum rdmax_log_item {
#define RDMAX__X(id, text) RDMAX_LOG_ITEM_##id,
    RDMAX__LOG_ITEMS(RDMAX__X)
#undef RDMAX__X
    RDMAX_LOG_ITEM__COUNT
} rdmax_log_item;
typedef enum rdmax_ep_state {
    RDMAX_EP_INIT = 0, RDMAX_EP_CONNECTED, RDMAX_EP_ERROR, RDMAX_EP_CLOSED
} rdmax_ep_state;
typedef enum rdmax_op {
    RDMAX_OP_SEND = 0, RDMAX_OP_PUT, RDMAX_OP_GET, RDMAX_OP_FADD, RDMAX_OP_CSWAP, RDMAX_OP_FLUSH,
    RDMAX_OP_GRANT,            /* internal: a credit grant for RC send flow control */
    RDMAX_OP_KEEPALIVE,        /* internal: a zero-length write that finds out whether an idle peer lives */
    RDMAX_OP_CLOSE,            /* internal: the goodbye of rdmax_ep_disconnect */
    RDMAX_OP_PUT_IMM,          /* rdmax_put_imm: a put whose 32-bit notice reaches the peer's imm_cb */
    RDMAX_OP_BIND,             /* internal: a memory window bound to the endpoint at connect (EXPOSED MEMORY) */
    RDMAX_OP__COUNT
} rdmax_op;
#define RDMAX_MAX_REGIONS 16          /* most memory regions one endpoint advertises to its peer */
#define RDMAX_CONN_RECORD_HEAD 76       /* bytes of the out-of-band record without extra regions */
#define RDMAX_CONN_RECORD_REGION 20     /* bytes of each region after the first */
#define RDMAX_CONN_RECORD_SIZE (RDMAX_CONN_RECORD_HEAD + RDMAX_CONN_RECORD_REGION * (RDMAX_MAX_REGIONS - 1))
                                      /* the largest record, version 4 */
#define RDMAX_CONN_RECORD_MAGIC 0x52444d58u /* "RDMX" */
#define RDMAX_CONN_RECORD_VERSION 4     /* 4: the port's LID, link layer, GID type and subnet prefix (3: without
                                         them; 2: immediate data in network order): peers of two
                                         versions refuse each other at connect */
#define RDMAX_CM_RECORD_SIZE 36         /* bytes of the compact record in rdma_cm's private data (one region) */
#define RDMAX_SETUP_TCP 0             /* rdmax_ctx_desc.conn_setup: rdmax's record over TCP */
#define RDMAX_SETUP_CM 1              /* rdmax_ctx_desc.conn_setup: rdma_cm (librdmacm) */
#define RDMAX_TRANSPORT_ID_RC 1
#define RDMAX_TRANSPORT_ID_UD 2
#define RDMAX_UD_GRH 40
#define RDMAX_UD_QKEY 0x01234567u     /* the context's UD QP: librdmacm's RDMA_UDP_QKEY, the Q_Key of groups
                                         joined through rdma_cm (a QP has one Q_Key) */
#define RDMAX_MCAST_CM 1              /* rdmax_ctx_desc.mcast_join: rdma_join_multicast (the default) */
#define RDMAX_MCAST_ATTACH 2          /* rdmax_ctx_desc.mcast_join: ibv_attach_mcast alone (RoCE v2 only) */

/* ---- types -------------------------------------------------------------------------------------- */
typedef struct rdmax_ctx rdmax_ctx;
typedef struct rdmax_ep rdmax_ep;
typedef struct rdmax_listener rdmax_listener;
typedef struct rdmax_comp rdmax_comp;

typedef void (*rdmax_comp_cb)(rdmax_comp *comp, rdmax_status status);
/* A completion the caller owns. Either set cb (called from rdmax_progress) or leave it NULL and poll
   `done`, decided before the operation that takes it (see COMPLETION OBJECTS); `user` is yours. An
   operation given one always reports through it (see THE COMPLETION CONTRACT). rdmax never clears
   `done`: reset it before reusing the object. */
struct rdmax_comp {
    rdmax_comp_cb cb;
    void *user;
    rdmax_status status;
    volatile int done;
};

/* Not API: the pending queue's link that rdmax_req embeds (the arbiter: in the inline internals
   at the end of this file). Zero means "not queued". */
typedef struct rdmax__arb_elem rdmax__arb_elem;
struct rdmax__arb_elem {
    rdmax__arb_elem *next;       /* NULL: not queued; RDMAX__ARB_END: last in its group */
};

/* A request that waits in an endpoint's pending queue (the arbiter) until resources return. The caller
   owns it until it completes. Two ways to use it:
   - explicit (rdmax_ep_pending_add): set `cb`; when resources are back the arbiter calls cb(req), which
     posts and returns its status (RDMAX_ERR_NO_RESOURCE keeps the request queued).
   - automatic (rdmax_req_post): leave `cb` NULL and fill the operation; it is posted now or queued, and
     `comp` (required) reports the result either way.
   A purge (rdmax_ep_pending_purge, rdmax_ep_destroy) completes `comp`, if set, with RDMAX_ERR_CANCELED. */
typedef struct rdmax_req rdmax_req;
typedef rdmax_status (*rdmax_pending_cb)(rdmax_req *req);
struct rdmax_req {
    rdmax__arb_elem rdmax__elem; /* the arbiter's link (private; rdmax_req_query_ep() gives the endpoint) */
    rdmax_pending_cb cb;
    rdmax_comp *comp;
    void *user;
    /* the operation, for rdmax_req_post */
    uint8_t op;                 /* rdmax_op: SEND, PUT, PUT_IMM, GET, FADD, CSWAP */
    const void *buf;            /* source (send, put), destination (get), 8-byte result (atomics) */
    size_t len;
    const struct rdmax_mem *mem;
    uint64_t raddr;
    uint32_t rkey;
    uint64_t arg0, arg1;        /* fadd: add; cswap: compare, swap; put_imm: arg0 is the immediate */
    struct rdmax_ep *rdmax__ep;
};

/* rdmax_req_query_ep: the endpoint a request was queued on or posted to (for a pending callback). */
RDMAX_INLINE rdmax_ep *rdmax_req_query_ep(const rdmax_req *req)
{
    return req->rdmax__ep;
}

/* A message received on an endpoint: `data` is valid only during the callback. */
typedef void (*rdmax_recv_cb)(rdmax_ep *ep, void *data, size_t len, void *user);
/* A put with immediate data (rdmax_put_imm) landed: its len bytes are in place in the memory it
   targeted, and imm is the sender's 32 bits, untouched by rdmax. */
typedef void (*rdmax_imm_cb)(rdmax_ep *ep, uint32_t imm, size_t len, void *user);
/* An endpoint left RDMAX_EP_CONNECTED (rdmax_ep_desc.state_cb): state RDMAX_EP_ERROR with the error as
   reason (what rdmax_ep_query_error returns), or RDMAX_EP_CLOSED with reason RDMAX_ERR_CLOSED (the peer
   closed) or RDMAX_OK (this side did: rdmax_ep_disconnect). */
typedef void (*rdmax_state_cb)(rdmax_ep *ep, rdmax_ep_state state, rdmax_status reason, void *user);

typedef struct rdmax_allocator {
    void *(*alloc)(size_t size, void *user);
    void (*free)(void *ptr, void *user);
    void *user;
} rdmax_allocator;

typedef struct rdmax_logger {
    /* item says which message it is (RDMAX_LOG_ITEM_*); msg names the device, endpoint and call, and has
       no trailing newline. Called on the thread of the rdmax call that logs. */
    void (*func)(rdmax_log_level level, rdmax_log_item item, const char *msg, void *user);
    void *user;
} rdmax_logger;

/* A registered memory region. Fill iovs' lkey from `lkey`. Expose it on an endpoint for a peer to reach it
   (EXPOSED MEMORY: rkey is 0, the peer's key is the endpoint's), or register it with
   RDMAX_ACCESS_ANY_ENDPOINT to hand `addr`/`rkey` to peers yourself. */
typedef struct rdmax_mem {
    void *addr;
    size_t len;
    uint32_t lkey, rkey;
    struct ibv_mr *mr;
    rdmax_ctx *ctx;
    int numa_node;        /* node the memory was requested on, -1 if local */
    int owned;            /* allocated by rdmax_mem_alloc */
    unsigned access;      /* RDMAX_ACCESS_* as registered */
} rdmax_mem;

typedef struct rdmax_iov {
    void *addr;
    uint32_t len;
    uint32_t lkey;
} rdmax_iov;

/* One put of rdmax_put_list: as rdmax_put(ep, buf, len, NULL, raddr, rkey, NULL). */
typedef struct rdmax_put_req {
    const void *buf;
    size_t len;
    uint64_t raddr;
    uint32_t rkey;
} rdmax_put_req;

/* A peer's memory region, as it was handed over in the connection record (rdmax_ep_query_remote). */
typedef struct rdmax_rbuf {
    uint64_t addr;
    uint64_t len;
    uint32_t rkey;
} rdmax_rbuf;

/* The connection record, decoded. On the wire, in network order, RDMAX_CONN_RECORD_HEAD bytes:
     0 magic u32 | 4 version u16 | 6 length u16 (of the whole record) | 8 transport u8 | 9 mtu u8 (1..5)
    10 credits u16 (receive buffers the sender of the record has posted; RC: >= 2, its window + 1:
       the peer keeps the last for grants, see RECEIVING)
    12 qpn u32 (24 bits, != 0) | 16 psn u32 (24 bits) | 20 qkey u32 (UD; 0 for RC) | 24 rkey u32
    28 recv_size u32 (largest message the sender of the record accepts) | 32 gid[16]
    48 region 0 address u64 | 56 region 0 length u64 (0: no region; then address and rkey are 0)
    64 subnet_prefix u64 | 72 lid u16 | 74 link_layer u8 | 75 gid_type u8 (the sender's port: InfiniBand
       (1): LID 1..0xbfff and GID type IB (0); Ethernet (2): LID 0 and GID type RoCE v1 (1) or v2 (2))
   then regions 1..n-1 packed, RDMAX_CONN_RECORD_REGION bytes each: address u64 | length u64 | rkey u32
   (length != 0). length = RDMAX_CONN_RECORD_HEAD + RDMAX_CONN_RECORD_REGION * (n - 1), at most
   RDMAX_CONN_RECORD_SIZE; n_regions is 0 or 1 for a record of RDMAX_CONN_RECORD_HEAD bytes. */
typedef struct rdmax_conn_record {
    uint8_t transport, mtu;
    uint16_t credits;
    uint32_t qpn, psn, qkey, recv_size;
    uint8_t gid[16];
    uint32_t n_regions;         /* 0..RDMAX_MAX_REGIONS */
    rdmax_rbuf regions[RDMAX_MAX_REGIONS];
    uint64_t subnet_prefix;     /* the first 8 bytes of the sender's GID, as a number (InfiniBand: a GRH is
                                   added when it differs from ours) */
    uint16_t lid;               /* the sender's port LID (InfiniBand), 0 on Ethernet */
    uint8_t link_layer;         /* IBV_LINK_LAYER_INFINIBAND (1) or IBV_LINK_LAYER_ETHERNET (2) */
    uint8_t gid_type;           /* IBV_GID_TYPE_IB (0), _ROCE_V1 (1) or _ROCE_V2 (2) */
} rdmax_conn_record;

typedef struct rdmax_ctx_desc {
    const char *device;        /* NULL: $RDMAX_DEVICE, else the first device with an active port */
    uint8_t port;              /* 0: first active port */
    bool gid_index_set;        /* false: $RDMAX_GID_INDEX, else RoCE v2 IPv4-mapped GID */
    int gid_index;
    bool numa_node_set;        /* false: $RDMAX_NUMA_NODE, else the device's node (-1 = local) */
    int numa_node;
    uint32_t cq_depth;         /* 0: 4096: send CQ entries (the receive CQ grows with the RC credits of
                                  the endpoints; the UD QP has its own) */
    uint32_t max_eps;          /* 0: 65535 endpoints per context (the most a wr_id can name); the table
                                  grows as endpoints are made */
    uint32_t max_qp_wr;        /* 0: the device's max_qp_wr; else a lower cap on every endpoint's send and
                                  receive queue (rdmax_dev_attr.max_qp_wr reports the cap applied): a
                                  larger sq_depth is clamped to it */
    rdmax_log_level log_level; /* used when log_level_set; else $RDMAX_LOG_LEVEL, else warn */
    bool log_level_set;
    rdmax_allocator allocator; /* zero: RDMAX_MALLOC/RDMAX_FREE, else malloc/free; alloc and free both or
                                  neither (half: RDMAX_ERR_INVALID_PARAM, item CTX_DESC) */
    rdmax_logger logger;       /* zero: stderr */
    bool rcache_disable;       /* false: buffers passed without an rdmax_mem go through the rcache,
                                  made on first such use */
    uint32_t rcache_max_regions; /* 0: 65536 */
    uint64_t rcache_max_bytes; /* 0: unlimited */
    uint32_t handshake_ms;     /* 0: 10000: how long a listener gives one client to finish its handshake */
    uint32_t handshake_first_ms; /* 0: 1000: how long a listener waits for a new client's first byte
                                  before it drops it (a silent socket holds a slot no longer) */
    uint32_t handshake_slots;  /* 0: 256: handshakes a listener runs side by side (its backlog too), on
                                  both setup paths; when all are taken, a new client takes the oldest
                                  one's slot */
    uint32_t ud_rq_depth;      /* 0: 512: receive buffers of the context's UD QP (all UD endpoints share it) */
    uint32_t recv_reserve;     /* ignored (kept for source compatibility): each RC endpoint receives on a
                                  queue of its own that holds its credits alone (see RECEIVING), so
                                  no buffers are kept beyond them */
    uint8_t rcache_mode;       /* 0: RDMAX_RCACHE_AUTO (cache what a memory monitor covers, register the
                                  rest per operation); RDMAX_RCACHE_MANUAL; RDMAX_RCACHE_UNCACHED */
    uint8_t conn_setup;        /* 0: RDMAX_SETUP_TCP; RDMAX_SETUP_CM: listen/accept/connect through rdma_cm
                                  (see CONNECTION SETUP) */
    uint32_t recv_size;        /* 0: 4096: the recv_size of RC endpoints that do not set one. RC endpoints
                                  with the same recv_size share one receive queue and pool of buffers;
                                  this size's pool lives as long as the context */
    rdmax_ctx *parent;         /* NULL: open the device. Else share the parent's device and protection domain
                                  (see THREADS AND SHARED REGISTRATIONS); device, port, GID and NUMA node
                                  are the parent's, the fields above that choose them are ignored */
    const void *secret;        /* NULL: $RDMAX_SECRET (its bytes), else no secret. Else secret_len bytes
                                  (0: no secret, the variable ignored): a listener serves only clients
                                  that prove they know it, and a client connects only to a listener that
                                  proves it (see ADMISSION). Copied at create; rdmax_ctx_query_desc gives
                                  secret NULL and the length in use */
    size_t secret_len;
    uint8_t sl;                /* 0: $RDMAX_SL, else 0: the service level of every connection (0..15) */
    uint16_t pkey_index;       /* 0: $RDMAX_PKEY_INDEX, else 0: the P_Key table index of every QP */
    bool force_grh;            /* InfiniBand: false: a GRH only towards another subnet (the peer's subnet
                                  prefix differs from ours); true: on every packet (a routed fabric whose
                                  routers need it within one prefix). RoCE always carries one */
    uint8_t mcast_join;        /* 0: $RDMAX_MCAST_JOIN (cm or attach), else RDMAX_MCAST_CM: multicast joins
                                  go through rdma_cm; RDMAX_MCAST_ATTACH: ibv_attach_mcast and an IP-level
                                  join, RoCE v2 only (see UD AND MULTICAST) */
    const char *mcast_addr;    /* NULL: the IPv4 address of the port's netdev (from the IPv4-mapped GID, else
                                  the first local address rdma_cm binds to this device and port). Else the
                                  local IPv4 address rdma_cm joins from; read by rdmax_ctx_create */
} rdmax_ctx_desc;

typedef struct rdmax_ep_desc {
    uint8_t transport;         /* 0: RC when selected, else UD; or RDMAX_TRANSPORT_ID_RC / _UD */
    uint32_t sq_depth;         /* 0: 31: the requests that may be outstanding (the provider's queue memory
                                  grows with it: rxe gives n requests the power of two above n slots, 20 KiB
                                  per endpoint at 31, 36 KiB at 32 to 63); at most the device's (or
                                  rdmax_ctx_desc's) max_qp_wr and 32768. A batch of RDMAX_BATCH_MAX requests
                                  on one endpoint needs 32 */
    uint32_t rq_depth;         /* RC: the window of this peer (min 4, max 65534): the sends and puts
                                  with immediate it may have in flight to us, backed by rq_depth + 1
                                  buffers of the shared receive pool (the one more for its grants, see
                                  RECEIVING); fixed unless max_window is larger. 0: a window that adapts,
                                  from 2 up to max_window (on a pool of its own: 16, fixed). UD: unused
                                  (the context's ud_rq_depth) */
    uint32_t recv_size;        /* RC: 0: the context's recv_size: the largest message the peer may send (its
                                  rdmax_send refuses more), and the size of the shared buffers it lands in
                                  (one pool per size in use). UD: path MTU + GRH */
    uint32_t signal_interval;  /* 0: one signaled request in 64 (at most half the send queue); every
                                  request is signaled while half the context's send-CQ entries
                                  (cq_depth) are held, so many endpoints never strand them */
    uint32_t max_inline;       /* 0: the probed device maximum, at most 256 (on rxe a larger cap makes
                                  every send-queue entry twice as big); larger values are clamped to the
                                  device maximum; RDMAX_OFF: nothing inline (applied value 0), as on a
                                  device without inline data */
    uint8_t timeout;           /* 0: 18 (4.096 us * 2^18 = 1.07 s ack timeout, as UCX's) */
    uint8_t retry_cnt;         /* 0: 6 (rxe retries forever at 7; 6 reports a lost peer in 7.5 s) */
    uint8_t rnr_retry;         /* 0: 6 (7 would retry forever, which has locked up rxe) */
    uint8_t min_rnr_timer;     /* 0: 12 (0.64 ms) */
    uint8_t max_rd_atomic;     /* 0: device max_qp_rd_atom, negotiated down to the peer's */
    rdmax_recv_cb recv_cb;     /* called from rdmax_progress for each received message */
    void *user;
    rdmax_imm_cb imm_cb;       /* RC: called from rdmax_progress for each put with immediate data the peer
                                  made (rdmax_put_imm); NULL: such notices are counted as recv_drops */
    const rdmax_mem *expose;   /* region the peer may reach through this endpoint only (address, key,
                                  length: rdmax_ep_query_remote; see EXPOSED MEMORY); may be NULL */
    uint32_t watchdog_ms;      /* RC: 0: 2 x the RC retry time + 2 s (see FAILURES); RDMAX_OFF: never.
                                  An endpoint whose oldest signaled operation has not completed for this
                                  long (while rdmax_progress runs) fails with RDMAX_ERR_STALLED */
    uint32_t keepalive_ms;     /* RC: 0: 4000; RDMAX_OFF: never. An endpoint that posted nothing for this
                                  long sends a zero-length write, so a vanished peer is found within
                                  keepalive_ms + the RC retry time without application traffic */
    const rdmax_mem *const *expose_list; /* more buffers to advertise, after expose: the peer reads them */
    uint32_t expose_count;     /* back with rdmax_ep_query_remote(ep, i); at most RDMAX_MAX_REGIONS in all. Read
                                  by the create call (copied), so the list need not outlive it. rdma_cm
                                  setup (RDMAX_SETUP_CM) carries one region: connect and accept refuse
                                  more with RDMAX_ERR_INVALID_PARAM */
    uint8_t recv_pool;         /* RC: RDMAX_RECV_POOL_SHARED (0): the peer's messages land in the context's
                                  shared receive queue; RDMAX_RECV_POOL_OWN: in rq_depth + 1 buffers of
                                  recv_size of the endpoint's own (default window 16, at least 4, at most
                                  max_qp_wr - 1), for a peer where latency wins over memory (see RECEIVING).
                                  UD: unused (reads back 0) */
    uint16_t max_window;       /* RC, shared pool: the most the window grows to while the peer is busy
                                  (RECEIVING). 0: 64 when rq_depth is 0, else rq_depth (a fixed window);
                                  reads back as applied */
    rdmax_state_cb state_cb;   /* NULL: none. Called once when the endpoint fails or closes, with user,
                                  from rdmax_progress or rdmax_wait outside every other callback and
                                  never inside rdmax_ep_flush or rdmax_ep_disconnect of that endpoint (at
                                  the next health pass, within a few ms, or the first after that call
                                  returns): it may destroy the endpoint, post on others, connect or accept
                                  (see FAILURES) */
} rdmax_ep_desc;
#define RDMAX_RECV_POOL_SHARED 0
#define RDMAX_RECV_POOL_OWN 1
#define RDMAX_OFF UINT32_MAX

/* What an endpoint looks like now (rdmax_ep_query_resources): for tests, diagnostics and flow control. */
typedef struct rdmax_ep_resources {
    rdmax_ep_state state;
    uint32_t sq_free;           /* send-queue slots free now */
    uint32_t outstanding;       /* operations posted and not yet completed (0 after a flush) */
    uint32_t reads_free;        /* RDMA reads and atomics that may still be issued */
    uint32_t recv_window;       /* RC: the window this endpoint gives its peer now (it adapts: see
                                   RECEIVING); UD: 0 */
    uint32_t send_credits;      /* RC: sends and puts with immediate that may go now: the peer's window
                                   (its rq_depth) less those outstanding or not yet granted back (the
                                   credit kept for grants not counted). UD: UINT32_MAX */
    size_t pending;             /* requests waiting in the endpoint's pending queue */
    uint32_t qp_num, peer_qp_num;
    uint32_t n_remote;          /* regions the peer advertised (rdmax_ep_query_remote) */
    void *recv_pool;            /* the receive buffers (recv_pool_bytes): for NUMA placement checks (RC:
                                   the first chunk of the shared pool it receives into) */
    size_t recv_pool_bytes;
    struct ibv_qp *qp;          /* the verbs QP, for diagnostics and fault injection only: changing its
                                   state or posting to it behind rdmax's back breaks the endpoint */
} rdmax_ep_resources;

/* What one shared receive pool of a context looks like now (rdmax_ctx_query_recv_pool): for tests,
   diagnostics and memory accounting. RC endpoints with the same recv_size receive buffers of one pool,
   each on its own receive queue (see RECEIVING); buffers = posted + free + those in a receive callback
   now. */
typedef struct rdmax_recv_pool_info {
    uint32_t recv_size;         /* bytes of each buffer: the pool's key */
    uint32_t endpoints;         /* endpoints receiving into it now */
    uint32_t target;            /* the credits they give: the sum of their windows + 1 each (recv_window
                                   + 1, as they adapt); that many are kept posted, each endpoint's on its
                                   queue (more for a while after a window shrank) */
    uint32_t reserve;           /* 0 (buffers beyond the credits: none are kept, see recv_reserve) */
    uint32_t posted;            /* buffers on the endpoints' receive queues now */
    uint32_t free;              /* buffers neither posted nor in a receive callback (draining ones too) */
    uint32_t buffers;           /* buffers allocated and registered (buffers x recv_size bytes); a pool
                                   more than a chunk above its target gives the newest chunks back */
    uint32_t chunks;            /* allocations they came in (each one NUMA-placed allocation and one MR) */
    uint32_t srq_cap;           /* 0: there is no shared receive queue (kept for source compatibility) */
    uint32_t low_water;         /* 0: no low-water mark (kept for source compatibility) */
    uint32_t groups;            /* receive CQs the size's endpoints are spread over, one pool each (a
                                   context opens another when one CQ would pass max_cqe); the counts above
                                   are their sums */
} rdmax_recv_pool_info;

/* Limits probed on the opened device and port. */
typedef struct rdmax_dev_attr {
    char name[64];
    uint8_t port;
    int gid_index;
    union ibv_gid gid;
    enum ibv_mtu active_mtu;
    uint32_t mtu_bytes;
    uint32_t max_inline;       /* found by creating throwaway QPs: verbs cannot report it */
    uint32_t max_qp_rd_atom;
    uint32_t max_sge;
    uint32_t max_cqe;
    uint32_t max_qp_wr;
    uint32_t max_qp;           /* QPs of the whole device (all processes) */
    uint32_t max_srq_wr;       /* receive buffers one shared receive queue can hold */
    uint64_t max_msg_sz;
    int link_layer;            /* IBV_LINK_LAYER_INFINIBAND or _ETHERNET (a port reporting UNSPECIFIED: IB) */
    int numa_node;             /* node the device sits on, -1 unknown */
    uint8_t mem_windows;       /* 1: type-2 memory windows: exposed regions are scoped to their endpoint
                                  (EXPOSED MEMORY); 0: a region's remote rights are its registration's */
    int gid_type;              /* of gid: IBV_GID_TYPE_IB, _ROCE_V1 or _ROCE_V2 */
    uint16_t lid;              /* the port's LID (InfiniBand; 0 on Ethernet) */
    int atomic_cap;            /* IBV_ATOMIC_NONE: rdmax_fadd and rdmax_cswap return RDMAX_ERR_UNSUPPORTED */
    uint32_t max_srq;          /* 0: no shared receive queues: RC endpoints get pools of their own */
} rdmax_dev_attr;

/* Counters rdmax keeps anyway; plain increments on the fast path. */
typedef struct rdmax_counters {
    uint64_t posted[RDMAX_OP__COUNT];
    uint64_t completed[RDMAX_OP__COUNT];
    uint64_t bytes[RDMAX_OP__COUNT];
    uint64_t post_calls;        /* ibv_post_send calls (one system call each on rxe) */
    uint64_t recv_post_calls;
    uint64_t polls, empty_polls, cqes;
    uint64_t recv_msgs, recv_bytes;
    uint64_t err_cqes;
    uint64_t flushed_cqes;      /* send completions flushed after their endpoint failed */
    uint64_t recv_flushed;      /* receive buffers flushed after their endpoint failed */
    uint64_t stale_wr_ids;      /* completions of destroyed endpoints, dropped */
    uint64_t recv_drops;        /* receive completions the library had to drop */
    uint64_t no_resource;       /* posts refused with RDMAX_ERR_NO_RESOURCE */
    uint64_t ep_errors;
    uint64_t dispatched;        /* pending requests the arbiter ran */
    uint64_t ud_skipped;        /* UD: datagrams a connected peer numbered that were skipped over */
    uint64_t ud_late;           /* UD: datagrams that came after a later one (counted in ud_skipped) */
    uint64_t ud_duplicates;     /* UD: datagrams that came twice */
    uint64_t recv_imms;         /* puts with immediate data received (handed to imm_cb or dropped) */
    uint64_t srq_limit_events;  /* 0: rdmax makes no shared receive queue (kept for source compatibility) */
    uint64_t ud_wrong_source;   /* UD: datagrams naming an endpoint whose peer did not send them (source
                                   GID or QPN not the peer's), dropped (also in recv_drops) */
    uint64_t window_breaks;     /* RC: endpoints failed with RDMAX_ERR_PEER_WINDOW (also in ep_errors) */
    uint64_t grant_waits;       /* RC: windows that would have grown but waited for the shared pool (its
                                   buffers, or its bound: the receive CQ's max_cqe, max_srq_wr) */
    uint64_t auth_refused;      /* connections refused with RDMAX_ERR_OOB_AUTH: a client this listener
                                   refused, or a listener this client did (see ADMISSION) */
    uint64_t recv_chunks_freed; /* RC: chunks of the shared receive pool given back once windows shrank
                                   or endpoints went (see rdmax_ctx_query_recv_pool) */
} rdmax_counters;

/* ---- API: names, context, memory, connecting, endpoints, multicast, batching, pending queue ----- */
/* rdmax_status_str, rdmax_op_str: the sentence of a status ("success", ...), the name of an operation
   ("send", "put", ...).
   Parameters: any value; one out of range gives "unknown ..." rather than failing.
   Result: a static string, never NULL.
   Threads: any thread. */
RDMAX_API const char *rdmax_status_str(rdmax_status s);
RDMAX_API const char *rdmax_op_str(rdmax_op op);

/* rdmax_ctx_create: opens the device (or joins desc->parent's), picks the port and GID, probes the
   limits, creates the CQs and the completion channel (see STEP BY STEP, ENVIRONMENT).
   Parameters: desc (NULL: all defaults; zero fields mean the documented defaults); ctx_out receives the
   context, NULL on failure.
   Result: RDMAX_OK; RDMAX_ERR_INVALID_PARAM (a bad desc field such as conn_setup, half an allocator, or
   a bad RDMAX_GID_INDEX / RDMAX_NUMA_NODE); RDMAX_ERR_NO_DEVICE (no such device, no active port, no
   GID: the text names device and port); RDMAX_ERR_NO_MEMORY; RDMAX_ERR_IO (names the verbs call and
   errno). Every failure is logged once and kept: rdmax_ctx_query_last_error(NULL) after the call.
   Threads: any thread; a child (desc->parent) on the parent's thread or while the parent is idle.
   rdmax_ctx_destroy: destroys the context's listeners, endpoints (their operations complete with
   RDMAX_ERR_CANCELED), receive queues, cache and CQs, then frees it; NULL is a no-op. Close profile
   objects and free rdmax_mem regions of the context first. Threads: the context's thread. */
RDMAX_API rdmax_status rdmax_ctx_create(const rdmax_ctx_desc *desc, rdmax_ctx **ctx_out);
RDMAX_API void rdmax_ctx_destroy(rdmax_ctx *ctx);
/* rdmax_ctx_query_last_error, rdmax_ctx_query_last_error_item: the text and item of the last error logged on ctx
   (also when the log level hid it).
   Parameters: ctx, or NULL: the last error logged on the calling thread, by any context, so the reason a
   rdmax_ctx_create failed survives it (the context is gone).
   Result: the text ("" if none; valid until the next error) and its RDMAX_LOG_ITEM_* (NONE if none).
   Threads: ctx's thread; with NULL, any thread (thread-local). */
RDMAX_API const char *rdmax_ctx_query_last_error(const rdmax_ctx *ctx);
RDMAX_API rdmax_log_item rdmax_ctx_query_last_error_item(const rdmax_ctx *ctx);
/* rdmax_log_item_str: the sentence of a log item (the list RDMAX__LOG_ITEMS).
   Parameters: item; out of range gives "unknown log item".  Result: a static string.
   Threads: any thread. */
RDMAX_API const char *rdmax_log_item_str(rdmax_log_item item);
/* Context accessors.
   rdmax_ctx_query_attr: the limits probed on the device and port (rdmax_dev_attr), valid while ctx lives.
   rdmax_ctx_query_desc: the desc as applied (defaults, environment and device limits filled in).
   rdmax_ctx_query_fd: the completion channel's fd: readable when a completion arrives after rdmax_ctx_arm.
   A program that polls it in its own loop calls rdmax_wait(ctx, 0) while it is readable: a call handles
   completions, or finds none, takes the notification and arms again (then RDMAX_ERR_TIMEOUT, and the
   fd is quiet until the next completion).
   rdmax_ctx_arm: asks for one notification on each CQ; RDMAX_OK, or RDMAX_ERR_IO.
   rdmax_ctx_query_counters: copies the context's counters (rdmax_counters) into *out.
   rdmax_ctx_query_rcache: the context's registration cache, for its stats, invalidate and drain; NULL until
   the first raw buffer made it, or when rcache_disable is set.
   Parameters: a live ctx (not NULL). Threads: the context's thread. */
RDMAX_API const rdmax_dev_attr *rdmax_ctx_query_attr(const rdmax_ctx *ctx);
RDMAX_API rdmax_ctx_desc rdmax_ctx_query_desc(const rdmax_ctx *ctx);
RDMAX_API int rdmax_ctx_query_fd(const rdmax_ctx *ctx);
RDMAX_API rdmax_status rdmax_ctx_arm(rdmax_ctx *ctx);
/* rdmax_wait: blocks until a completion arrives, one of the context's listeners has work for
   rdmax_accept (a client connecting or a handshake step), or timeout_ms passes, then progresses (also the
   watchdog, keepalives, device events and state callbacks, in slices of 100 ms). So a server's loop is
   rdmax_progress, rdmax_accept(l, desc, &ep, 0) until it returns RDMAX_ERR_TIMEOUT, rdmax_wait.
   Parameters: ctx; timeout_ms (-1: forever; 0: do not block).
   Result: RDMAX_OK (completions were handled, or a listener has work), RDMAX_ERR_TIMEOUT (neither within
   timeout_ms), RDMAX_ERR_IO (the CQs could not be armed) or RDMAX_ERR_NO_MEMORY (more than 16
   listeners, and their poll set could not be allocated).
   Threads: the context's thread. */
RDMAX_API rdmax_status rdmax_wait(rdmax_ctx *ctx, int timeout_ms);
RDMAX_API void rdmax_ctx_query_counters(const rdmax_ctx *ctx, rdmax_counters *out);
RDMAX_API struct rdmax_rcache *rdmax_ctx_query_rcache(const rdmax_ctx *ctx);
/* rdmax_ctx_query_recv_pool: the shared receive pool of RC endpoints whose buffers are recv_size bytes,
   now (rdmax_recv_pool_info): its buffers, how many are posted and free, the credits it backs. The
   profile variables recv_pool.bytes and recv_pool.posted are the totals over all pools, readable from
   another thread.
   Parameters: a live ctx; recv_size (0: the context's recv_size, whose pool lives as long as the
   context once its first RC endpoint made it; an endpoint's is rdmax_ep_query_desc(ep).recv_size);
   out receives the pool's state.
   Result: true if ctx has a pool of that size now; false if not (no RC endpoint of that size was made
   yet, its last one is gone, or the endpoints of that size have pools of their own): *out zeroed.
   Threads: the context's thread. */
RDMAX_API bool rdmax_ctx_query_recv_pool(const rdmax_ctx *ctx, uint32_t recv_size, rdmax_recv_pool_info *out);

/* rdmax_mem_alloc, rdmax_mem_reg, rdmax_mem_free: registered memory (see STEP BY STEP: pass the
   rdmax_mem as `mem` of an operation, or expose it to the peer with rdmax_ep_desc.expose).
   rdmax_mem_alloc allocates len bytes on the context's NUMA node and registers them; rdmax_mem_reg
   registers memory you own (you free it, after rdmax_mem_free); rdmax_mem_free deregisters (and frees
   what rdmax_mem_alloc allocated); NULL is a no-op. Free a region before its context.
   Parameters: access: RDMAX_ACCESS_* (remote rights are granted only when asked for, and only through
   the endpoints the region is exposed on unless RDMAX_ACCESS_ANY_ENDPOINT: EXPOSED MEMORY); out receives it.
   Result: RDMAX_OK; RDMAX_ERR_INVALID_PARAM (NULL addr, len 0); RDMAX_ERR_NO_MEMORY; RDMAX_ERR_IO
   (ibv_reg_mr failed: logged with errno, item MEM_REG or MEM_ALLOC).
   Threads: the context's thread; a child context's region also works on its parent's and siblings'
   endpoints (THREADS AND SHARED REGISTRATIONS). */
RDMAX_API rdmax_status rdmax_mem_alloc(rdmax_ctx *ctx, size_t len, unsigned access, rdmax_mem **out);
RDMAX_API rdmax_status rdmax_mem_reg(rdmax_ctx *ctx, void *addr, size_t len, unsigned access, rdmax_mem **out);
RDMAX_API void rdmax_mem_free(rdmax_mem *mem);
/* rdmax_numa_alloc, rdmax_numa_free: page-granular memory on the context's NUMA node (anonymous mmap
   when the node is unknown), what rdmax uses for its own buffers.
   Parameters: ctx; len (free: the same len as the alloc; p NULL is a no-op).
   Result: the memory, or NULL. Not registered: pass it to rdmax_mem_reg if needed.
   Threads: any thread while ctx lives. */
RDMAX_API void *rdmax_numa_alloc(rdmax_ctx *ctx, size_t len);
RDMAX_API void rdmax_numa_free(rdmax_ctx *ctx, void *p, size_t len);

/* rdmax_conn_record_encode, rdmax_conn_record_decode: the wire format of the connection record (pure
   functions, usable without a device; layout at rdmax_conn_record).
   encode: writes info and returns its length (RDMAX_CONN_RECORD_HEAD .. RDMAX_CONN_RECORD_SIZE; regions past
   RDMAX_MAX_REGIONS are not written).
   decode: takes exactly one record (len equal to its length field) and validates every field.
   Parameters: why (may be NULL), why_len: gets a sentence naming the bad field and the value seen.
   Result (decode): RDMAX_OK, or the RDMAX_ERR_OOB_* status of the first field that is wrong.
   Threads: any thread (no state). */
RDMAX_API size_t rdmax_conn_record_encode(const rdmax_conn_record *info, uint8_t out[RDMAX_CONN_RECORD_SIZE]);
RDMAX_API rdmax_status rdmax_conn_record_decode(const uint8_t *buf, size_t len, rdmax_conn_record *out,
                                              char *why, size_t why_len);
/* The compact record of rdma_cm setup (RDMAX_SETUP_CM), in the connect request's and reply's private data:
     0 magic u32 | 4 version u16 | 6 length u16 (RDMAX_CM_RECORD_SIZE) | 8 transport u8 | 9 zero u8
    10 credits u16 | 12 rkey u32 | 16 recv_size u32 | 20 region 0 address u64 | 28 region 0 length u64
   The QP number, PSN, MTU and GID are rdma_cm's (the request, the route): decode takes them in `cm`
   (and copies its LID, link layer, GID type and subnet prefix, which rdma_cm's route covers) and checks
   the whole record as rdmax_conn_record_decode does, with the same statuses and sentences. len may
   exceed the record (rdma_cm pads private data with zeros).
   Parameters, Result, Threads: as rdmax_conn_record_encode / _decode (encode writes RDMAX_CM_RECORD_SIZE
   bytes and writes region 0 only). */
RDMAX_API void rdmax_cm_record_encode(const rdmax_conn_record *info, uint8_t out[RDMAX_CM_RECORD_SIZE]);
RDMAX_API rdmax_status rdmax_cm_record_decode(const uint8_t *buf, size_t len, const rdmax_conn_record *cm,
                                            rdmax_conn_record *out, char *why, size_t why_len);
/* rdmax_oob_exchange: sends our record on a connected TCP socket and reads the peer's, with one deadline
   for the whole exchange (what rdmax_connect and rdmax_accept do; for your own out-of-band channel).
   Parameters: fd (blocking or not; left open); local; remote receives the decoded record; timeout_ms;
   why/why_len (may be NULL) get the reason of a failure. No ADMISSION: a peer that requires a secret
   gives RDMAX_ERR_OOB_AUTH.
   Result: RDMAX_OK; RDMAX_ERR_TIMEOUT; RDMAX_ERR_OOB_* (the record, as rdmax_conn_record_decode);
   RDMAX_ERR_IO (the socket failed). Threads: any thread (no context). */
RDMAX_API rdmax_status rdmax_oob_exchange(int fd, const rdmax_conn_record *local, rdmax_conn_record *remote,
                                          int timeout_ms, char *why, size_t why_len);

/* rdmax_listener_create, rdmax_accept, rdmax_connect, rdmax_listener_query_port: connecting (see CONNECTING).
   rdmax_listener_create binds a TCP listener (host NULL: all IPv6 and IPv4 addresses; port 0: any, read it back
   with rdmax_listener_query_port) and returns RDMAX_OK, RDMAX_ERR_INVALID_PARAM, RDMAX_ERR_NO_MEMORY or
   RDMAX_ERR_IO (logged, item LISTEN);
   rdmax_accept returns the first client whose handshake completes. Handshakes run side by side (up to
   rdmax_ctx_desc.handshake_slots, 256; the TCP backlog is as long), non-blocking, each with its own
   deadline (rdmax_ctx_desc.handshake_ms) apart from the accept wait: a silent, slow or malformed client
   delays nobody. A flood cannot lock the listener: a client that sent nothing for handshake_first_ms
   (1 s) goes (rdmax_connect makes its endpoint before it connects, so its record follows at once), and
   with every slot taken a new client takes the slot of the handshake idle the longest (once idle 0.5 s;
   a client that is sending is never pushed out). So a real client is served within
   about handshake_first_ms plus the kernel's SYN retry (1 s) while hostile sockets come and go
   (tests/oob_test on rxe: 2,000 in a burst, half silent, a quarter with a truncated record, a quarter
   closing at once: 20 of 20 real clients connected, 0.38 s on average, 1.3 s at most; the fds went back
   to their level). The same holds with RDMAX_SETUP_CM: handshake_slots requests run side by side (the
   kernel holds four times as many unread, up to its net.rdma_ucm.max_backlog), a request that never
   confirms (no RTU) holds its slot until handshake_ms, and with every slot taken a new request that
   checks out takes the slot of the one that waited longest for its RTU (once 0.5 s); until one has, it
   is rejected with RDMAX_ERR_NO_RESOURCE and rdmax_connect tries again. There a real client waits
   also for the requests queued before its own, each with a valid record costing the listener a QP
   (tests/cm_test on rxe: 2,000 requests in a burst, half never confirming, a quarter garbage, a quarter
   gone at once: 20 of 20 real clients served, 3.9 s on average; QPs, rdma_cm ids and fds went back to
   their level). The endpoint is made only after the client's record
   checks out (and its proof of the secret, see ADMISSION), with the desc of the call that read that record, which may be an earlier call than the one
   that returns it: recv_cb, imm_cb, user, state_cb, watchdog_ms and keepalive_ms are always the returning
   call's, the rest (queue depths, sizes, timeouts, expose) the making call's, so pass the same to every
   call. The server's ready byte comes from the returning call, and the client's rdmax_connect returns only
   after it, so no message of the client meets another call's callbacks or user; bytes a client that is
   not rdmax sends before that byte are dropped and counted (recv_drops). With RDMAX_SETUP_CM the client's
   connect returns once rdma_cm has established the connection, which may be before the accept call that
   returns its endpoint: until that call the endpoint holds what the client sends (in order; it grants no
   credits, so an rdmax client stops at its window) and delivers it to the returning call's callbacks and
   user from the next rdmax_progress; messages past the window (a client that is not rdmax) and what is
   held when the handshake fails are dropped and counted (recv_drops). Results: RDMAX_OK; RDMAX_ERR_TIMEOUT: nobody finished within timeout_ms (0 polls; an empty
   wait logs at debug level only, and handshakes in progress go on in the next call); a handshake failure
   (RDMAX_ERR_OOB_*, including RDMAX_ERR_OOB_TIMEOUT for a client that stalled): that client is dropped,
   the listener stays usable, call again. rdmax_connect resolves host (IPv4 or IPv6) and retries a peer
   that refuses or cannot be reached with backoff (10 ms doubling to 1 s) until timeout_ms.
   A negative timeout_ms is RDMAX_ERR_INVALID_PARAM for both; 0 polls (accept) or tries once (connect).
   With rdmax_ctx_desc.conn_setup = RDMAX_SETUP_CM all of this holds through rdma_cm (CONNECTION SETUP):
   a client whose connect request carries a bad record is rejected and accept returns its RDMAX_ERR_OOB_*;
   one that never confirms (no RTU) ends with RDMAX_ERR_OOB_TIMEOUT after handshake_ms, one that gives up
   or vanishes during its handshake with RDMAX_ERR_OOB_SYNC; connect retries while nobody listens.
   rdmax_connect's other results: RDMAX_ERR_CONNECT (nobody answered before timeout_ms), RDMAX_ERR_OOB_*
   (the peer's record), and what rdmax_ep_create returns. desc is read during the call (copied).
   Threads: the context's thread. */
RDMAX_API rdmax_status rdmax_listener_create(rdmax_ctx *ctx, const char *host, uint16_t port, rdmax_listener **out);
RDMAX_API uint16_t rdmax_listener_query_port(const rdmax_listener *l);
/* rdmax_listener_query_fd: a file descriptor that becomes readable when rdmax_accept has work (a new client
   or a handshake step): wait on it (poll/epoll), then call rdmax_accept(l, desc, &ep, 0). With
   RDMAX_SETUP_CM, the rdma_cm event channel's fd. Threads: the context's thread. */
RDMAX_API int rdmax_listener_query_fd(const rdmax_listener *l);
/* rdmax_listener_destroy: closes the listener and ends its handshakes (their half-made endpoints go).
   rdmax_ctx_destroy closes the listeners still open on the context (do not close those afterwards).
   Threads: the context's thread. */
RDMAX_API void rdmax_listener_destroy(rdmax_listener *l);
RDMAX_API rdmax_status rdmax_accept(rdmax_listener *l, const rdmax_ep_desc *desc, rdmax_ep **out, int timeout_ms);
RDMAX_API rdmax_status rdmax_connect(rdmax_ctx *ctx, const char *host, uint16_t port, const rdmax_ep_desc *desc,
                                     rdmax_ep **out, int timeout_ms);
/* rdmax_ep_create_pair: two endpoints of one context connected to each other (the --loopback mode;
   each sees the other's exposed regions through rdmax_ep_query_remote).
   Parameters: ctx; desc for both (copied); a, b receive them (NULL on failure).
   Result: RDMAX_OK, or what rdmax_ep_create / rdmax_ep_connect_record return. Threads: ctx's thread. */
RDMAX_API rdmax_status rdmax_ep_create_pair(rdmax_ctx *ctx, const rdmax_ep_desc *desc, rdmax_ep **a, rdmax_ep **b);
/* rdmax_ep_create, rdmax_ep_query_record, rdmax_ep_connect_record: the lower level of connecting, for your
   own out-of-band channel: create an endpoint (RDMAX_EP_INIT), read our record and carry it to the peer
   (rdmax_conn_record_encode), then connect with the peer's record (RDMAX_EP_CONNECTED).
   Parameters: desc (copied, NULL: defaults); remote: the peer's decoded record.
   Result (create): RDMAX_OK; RDMAX_ERR_INVALID_PARAM / RDMAX_ERR_UNSUPPORTED (bad desc, transport not
   selected: item EP_DESC); RDMAX_ERR_LIMIT (see LIMITS); RDMAX_ERR_NO_MEMORY; RDMAX_ERR_IO.
   Result (connect_info): RDMAX_OK; RDMAX_ERR_OOB_TRANSPORT (the peer's transport differs);
   RDMAX_ERR_IO (ibv_modify_qp, item QP_MODIFY; a memory window's bind, item MEM_WINDOW). Our exposed
   regions are reachable by the peer from its return (EXPOSED MEMORY): carry our record's readiness to the
   peer only after it. local_info cannot fail.
   Threads: the context's thread. */
RDMAX_API rdmax_status rdmax_ep_create(rdmax_ctx *ctx, const rdmax_ep_desc *desc, rdmax_ep **out);
RDMAX_API void rdmax_ep_query_record(const rdmax_ep *ep, rdmax_conn_record *info);
RDMAX_API rdmax_status rdmax_ep_connect_record(rdmax_ep *ep, const rdmax_conn_record *remote);
/* rdmax_ep_flush: waits, progressing the context, until every operation posted on ep has completed
   (posts a signaled zero-length write if the last post was unsignaled).
   Parameters: ep; timeout_ms (>= 0; 0: one pass).
   Result: RDMAX_OK (all done, none failed); RDMAX_ERR_TIMEOUT (item FLUSH_TIMEOUT);
   RDMAX_ERR_INVALID_PARAM (negative timeout_ms, or called from a comp callback: item
   FLUSH_IN_CALLBACK); the endpoint's error (RDMAX_ERR_RETRY_EXCEEDED, RDMAX_ERR_CLOSED, ...) when it
   failed or closed: never RDMAX_OK over a failed operation; RDMAX_ERR_CANCELED: a callback inside
   destroyed ep (see rdmax_ep_destroy), which is gone.
   Threads: the context's thread, not inside a comp callback. */
RDMAX_API rdmax_status rdmax_ep_flush(rdmax_ep *ep, int timeout_ms);
/* rdmax_ep_destroy: destroys ep; its pending requests and operations still in flight complete with
   RDMAX_ERR_CANCELED (now, before it returns); late completions are dropped. NULL is a no-op.
   Threads: the context's thread; allowed in ep's own receive or pending callback, not in a comp callback
   of ep (see COMPLETION OBJECTS). Inside rdmax_ep_flush or rdmax_ep_disconnect of ep, any endpoint's
   receive, pending or state callback may destroy ep: that call then returns RDMAX_ERR_CANCELED and ep is
   freed as it returns.
   rdmax_ep_query_error: the status that failed or closed ep (the first), RDMAX_OK if none. */
RDMAX_API void rdmax_ep_destroy(rdmax_ep *ep);
RDMAX_API rdmax_status rdmax_ep_query_error(const rdmax_ep *ep); /* first error, RDMAX_OK if none */
/* rdmax_ep_disconnect: graceful close. Waits (up to timeout_ms) for what is in flight, tells the peer (RC:
   a zero-length message the peer's rdmax_progress turns into RDMAX_EP_CLOSED and an EP_CLOSED event),
   and leaves ep in RDMAX_EP_CLOSED: later posts return RDMAX_ERR_CLOSED. Destroy it afterwards.
   Parameters: ep; timeout_ms (>= 0, else RDMAX_ERR_INVALID_PARAM).
   Result: RDMAX_OK, or the error that stopped the drain (the endpoint is closed either way);
   RDMAX_ERR_CANCELED: a callback inside destroyed ep (see rdmax_ep_destroy), which is gone.
   Threads: the context's thread. */
RDMAX_API rdmax_status rdmax_ep_disconnect(rdmax_ep *ep, int timeout_ms);

/* Endpoint accessors. Threads: the context's thread.
   rdmax_ep_query_remote: region `index` the peer advertised (its desc's expose, then expose_list, in order),
   NULL if it advertised fewer. Valid until the endpoint is destroyed. Example:
       const rdmax_rbuf *r = rdmax_ep_query_remote(ep, 0);
       if (r) rdmax_put(ep, buf, len, NULL, r->addr, r->rkey, &comp);
   rdmax_ep_query_remote_count: how many it advertised.
   rdmax_ep_query_desc: the desc as applied (sq_depth under the device limit, max_inline
   probed, max_rd_atomic negotiated, ...); its pointers (expose, expose_list, user) are as given (the
   list was read at creation: it need not point anywhere now). rdmax_ep_query_state: RDMAX_EP_INIT,
   _CONNECTED, _ERROR, _CLOSED. rdmax_ep_query_resources: resources and identity now (rdmax_ep_resources; its qp is
   the verbs QP, for tools and tests: moving it to another state fails the endpoint). rdmax_ep_query_ctx: the
   endpoint's context.
   Parameters: a live ep (not NULL). Result: as above; none fails. */
RDMAX_API const rdmax_rbuf *rdmax_ep_query_remote(const rdmax_ep *ep, uint32_t index);
RDMAX_API uint32_t rdmax_ep_query_remote_count(const rdmax_ep *ep);
RDMAX_API rdmax_ep_desc rdmax_ep_query_desc(const rdmax_ep *ep);
RDMAX_API rdmax_ep_state rdmax_ep_query_state(const rdmax_ep *ep);
RDMAX_API void rdmax_ep_query_resources(const rdmax_ep *ep, rdmax_ep_resources *out);
RDMAX_API rdmax_ctx *rdmax_ep_query_ctx(const rdmax_ep *ep);

#if RDMAX__HAS_UD
/* rdmax_mcast_join, rdmax_mcast_leave, rdmax_mcast_ep_create: UD multicast (see UD AND MULTICAST).
   rdmax_mcast_join joins the IPv4 group `group` (e.g. "239.1.2.3") through rdma_cm, or directly with
   mcast_join RDMAX_MCAST_ATTACH, and attaches ep's QP (a UD endpoint: the context's UD QP) to it; its
   datagrams then reach ep's recv_cb. rdmax_mcast_leave detaches and leaves (rdmax_ep_destroy too).
   rdmax_mcast_ep_create makes a send-only endpoint (desc copied) whose rdmax_send goes to every member;
   through rdma_cm it joins as a full member too (its QP is not attached: it receives nothing).
   A group has one receiving endpoint per context (the context's UD QP is attached once; its datagrams
   go to the endpoint that joined): another endpoint of the same context cannot join it until that one
   leaves; endpoints of other contexts or processes can. An endpoint joins at most 8 groups, a context's
   endpoints at most 64 in all.
   Result: RDMAX_OK; RDMAX_ERR_INVALID_PARAM (not an IPv4 multicast address, or another endpoint of this
   context joined the group); RDMAX_ERR_UNSUPPORTED (not a UD endpoint; the group's Q_Key is not the UD
   QP's; RDMAX_MCAST_ATTACH on InfiniBand or without an IPv4-mapped GID); RDMAX_ERR_NO_DEVICE (no local
   IPv4 address rdma_cm binds to the device); RDMAX_ERR_TIMEOUT (no join event within 10 s);
   RDMAX_ERR_NO_MEMORY; RDMAX_ERR_NO_RESOURCE (ep joined 8 groups, or the context's endpoints 64);
   RDMAX_ERR_IO (the join, its event, the IP join, the attach or the address handle failed). Failures of
   the group, the endpoint and the calls are logged (item MCAST).
   Threads: the context's thread. */
RDMAX_API rdmax_status rdmax_mcast_join(rdmax_ep *ep, const char *group);
RDMAX_API rdmax_status rdmax_mcast_leave(rdmax_ep *ep, const char *group);
RDMAX_API rdmax_status rdmax_mcast_ep_create(rdmax_ctx *ctx, const rdmax_ep_desc *desc, const char *group,
                                             rdmax_ep **out);
#endif

/* Batching (rdmax_batch_begin, rdmax_batch_end, below): between begin and end, operations are chained
   and posted with one ibv_post_send (a full chain of RDMAX_BATCH_MAX is posted early). */
/* rdmax_put_list: the n puts of reqs, in order, in one post list: what rdmax_batch_begin, rdmax_put(ep,
   r->buf, r->len, NULL, r->raddr, r->rkey, NULL) for each r and rdmax_batch_end do, with the tests and
   the bookkeeping a put of 8 to 16 bytes needs done once per list (RC; inside the caller's own batch
   the puts join it, and its rdmax_batch_end posts them).
   Parameters: reqs: n puts (each as rdmax_put without mem and comp: any length, beyond the inline
   size through the registration cache); done: NULL, or where the number of puts taken goes.
   Result: RDMAX_OK (all n taken, every buffer free again), RDMAX_INPROGRESS (all n taken, some not
   inline: keep those buffers until rdmax_ep_flush returns), or the error of the first put refused
   (as rdmax_put: the puts before it were taken, *done says how many, and the list stops there), or
   the post's RDMAX_ERR_IO (as rdmax_batch_end: the device refused the chain); RDMAX_ERR_INVALID_PARAM
   for reqs NULL with n not 0.
   Threads: the context's thread. */
#if RDMAX__HAS_RC
RDMAX_API rdmax_status rdmax_put_list(rdmax_ep *ep, const rdmax_put_req *reqs, size_t n, size_t *done);
#endif
/* Pending queue. rdmax_ep_pending_add queues req (cb set) and returns RDMAX_OK, or returns RDMAX_BUSY
   without queueing when the endpoint has room right now (post directly instead). rdmax_req_post posts the
   operation in req now if it can, else queues it; per-endpoint order always holds, because a direct
   post while requests wait is refused with RDMAX_ERR_NO_RESOURCE. rdmax_ep_pending_purge cancels every
   waiting request. A pending callback may post, push more requests, or destroy its own endpoint.
   Who is served next: see PENDING QUEUE (round-robin over endpoints, FIFO within one).
   Parameters: req: owned by the caller until it completes; pending_add needs req->cb, req_post needs
   req->comp and no cb.
   Result (pending_add): RDMAX_OK (queued), RDMAX_BUSY (room now: post directly), RDMAX_ERR_INVALID_PARAM
   (no cb), RDMAX_ERR_NOT_CONNECTED, RDMAX_ERR_ENDPOINT. Result (req_post): RDMAX_INPROGRESS (posted or
   queued: comp reports), RDMAX_ERR_INVALID_PARAM (cb set, or no comp), RDMAX_ERR_NOT_CONNECTED,
   RDMAX_ERR_ENDPOINT, or the operation's own error (nothing posted). purge: each request's comp (if
   any) gets RDMAX_ERR_CANCELED.
   Threads: the context's thread. */
RDMAX_API rdmax_status rdmax_ep_pending_add(rdmax_ep *ep, rdmax_req *req);
RDMAX_API rdmax_status rdmax_req_post(rdmax_ep *ep, rdmax_req *req);
RDMAX_API void rdmax_ep_pending_purge(rdmax_ep *ep);

/* ---- rcache: the registration cache ------------------------------------------------------------- */

#define RDMAX_RCACHE_DEFAULT_MAX_REGIONS 65536u
#define RDMAX_RCACHE_DEFAULT_MAX_BYTES SIZE_MAX /* unlimited: the device and RLIMIT_MEMLOCK decide */

#ifndef RDMAX_RCACHE_EVENT_RING_SIZE
#define RDMAX_RCACHE_EVENT_RING_SIZE 4096u
#endif

/* What rdmax_rcache_memhooks() reports. */
#define RDMAX_RCACHE_HOOKS_INTERPOSED 1u /* mmap, munmap, mremap, madvise, shmat, shmdt, brk, sbrk */
#define RDMAX_RCACHE_HOOKS_MALLOPT 2u    /* glibc told never to give memory back (RDMAX_MALLOPT) */
#define RDMAX_RCACHE_HOOKS_UFFD 4u       /* the userfaultfd monitor runs (mode RDMAX_RCACHE_AUTO) */

/* How a cache learns that the memory under a region changed (rdmax_rcache_desc.mode). */
#define RDMAX_RCACHE_AUTO 0     /* default: a range is cached only while a memory monitor sees every change
                                   to it (see REGISTRATION CACHE in the manual); a range no
                                   monitor covers is registered for its get alone and deregistered at its
                                   last put (stats.uncached), so a get is never served by a stale region */
#define RDMAX_RCACHE_MANUAL 1   /* cache every range and apply no memory event: the program promises to call
                                   rdmax_rcache_invalidate before the memory under a cached range changes */
#define RDMAX_RCACHE_UNCACHED 2 /* cache nothing: every get registers, its last put deregisters */

typedef struct rdmax_rcache_region rdmax_rcache_region;
typedef struct rdmax_rcache rdmax_rcache;

/* The operations the cache calls to register and deregister memory.
   reg:   register [addr, addr+len) (page-aligned; r->start/end/access are already set) with
          `access`; fill r->mr, r->lkey, r->rkey (and r->user if wanted). Return 0, or -errno as
          ibv_reg_mr sets it; the get turns it into a status (-EFAULT, -EINVAL:
          RDMAX_ERR_INVALID_PARAM; -ENOMEM: RDMAX_ERR_NO_MEMORY; anything else: RDMAX_ERR_IO) and
          keeps the errno's text in the last error. Must cope with unmapped memory by failing, not
          crashing.
   dereg: deregister r. Called exactly once for every successful reg, never from a memory hook.
   Neither may call back into the same cache. */
typedef struct rdmax_rcache_ops {
    int (*reg)(void *arg, void *addr, size_t len, unsigned access, rdmax_rcache_region *r);
    void (*dereg)(void *arg, rdmax_rcache_region *r);
    void *arg;
    /* notify: optional (NULL: none). Called after a region was evicted (RDMAX_RCACHE_NOTIFY_EVICT)
       or dropped because its memory changed (RDMAX_RCACHE_NOTIFY_INVALIDATE), with the region
       still readable, on the thread of the call that did it (a get, drain or invalidate), never
       from a memory hook. Must not call into the cache. */
    void (*notify)(void *arg, int what, const rdmax_rcache_region *r);
} rdmax_rcache_ops;
/* Values of notify's `what`. */
#define RDMAX_RCACHE_NOTIFY_EVICT 1       /* an unused region was evicted to honour a limit */
#define RDMAX_RCACHE_NOTIFY_INVALIDATE 2  /* a region was dropped because its memory changed */

/* Creation options. A zero field means the documented default; rdmax_rcache_query_desc()
   returns the applied values. */
typedef struct rdmax_rcache_desc {
    rdmax_rcache_ops ops; /* required: reg and dereg */
    size_t max_regions;   /* live registrations; default RDMAX_RCACHE_DEFAULT_MAX_REGIONS */
    size_t max_bytes;     /* registered bytes; default RDMAX_RCACHE_DEFAULT_MAX_BYTES */
    int thread_safe;      /* 0: caller serialises, no lock; 1: every call takes a mutex */
    int mode;             /* RDMAX_RCACHE_AUTO (0), _MANUAL or _UNCACHED */
    rdmax_allocator allocator; /* the cache's own memory (struct, page table, region slabs); alloc and
                                  free both or neither; zero: RDMAX_MALLOC/RDMAX_FREE. A context's cache
                                  gets rdmax_ctx_desc.allocator. */
} rdmax_rcache_desc;

/* Counters, a snapshot from rdmax_rcache_query_stats(). */
typedef struct rdmax_rcache_stats {
    uint64_t hits;           /* gets served by a cached region */
    uint64_t misses;         /* gets that registered memory (or failed trying) */
    uint64_t merges;         /* cached regions absorbed into a new, larger registration */
    uint64_t evictions;      /* unused regions deregistered to honour a limit or retry a reg */
    uint64_t invalidations;  /* regions dropped because their memory changed (explicit or hook) */
    uint64_t regions;        /* live registrations now (cached + in-use zombies + uncached) */
    uint64_t bytes;          /* bytes of those registrations */
    uint64_t cached_regions; /* regions visible to lookups now */
    uint64_t cached_bytes;   /* bytes of those */
    uint64_t reg_calls;      /* successful reg ops */
    uint64_t reg_failures;   /* failed reg ops */
    uint64_t dereg_calls;    /* dereg ops */
    uint64_t over_limit;     /* gets that left the cache over a limit (nothing was evictable) */
    uint64_t events;         /* memory events (ranges from the hooks) applied to this cache */
    uint64_t overflows;      /* times events were lost and every cached region was dropped */
    uint64_t uncached;       /* gets that registered a range for themselves alone (no monitor covers it,
                                or mode RDMAX_RCACHE_UNCACHED) */
} rdmax_rcache_stats;

/* A cached registration. Users read start, end, access, refcount, mr, lkey, rkey and may use
   `user`; everything named rdmax__* is private. */
struct rdmax_rcache_region {
    uintptr_t start;   /* first byte, page-aligned */
    uintptr_t end;     /* one past the last byte, page-aligned */
    uint32_t refcount; /* references held by users */
    unsigned access;   /* flags it was registered with (union of what merged requests asked) */
    uint32_t lkey;     /* from the reg op */
    uint32_t rkey;     /* from the reg op */
    void *mr;          /* the reg op's handle (struct ibv_mr * for verbs) */
    uint32_t rdmax__flags;
    uint32_t rdmax__pad;
    uint64_t rdmax__last_use; /* value of the cache clock at the last put to zero */
    /* ---- second cache line: cold ---- */
    void *user; /* free for the reg op */
    uint64_t rdmax__lru_stamp;
    rdmax_rcache_region *rdmax__lru_prev, *rdmax__lru_next;
    rdmax_rcache_region *rdmax__all_prev, *rdmax__all_next;
};

/* ---- rcache: API -------------------------------------------------------------------------------- */

/* rdmax_rcache_create
   Parameters:   desc: options (ops.reg and ops.dereg required); out: receives the cache.
   Result: RDMAX_OK; RDMAX_ERR_INVALID_PARAM (NULL desc or out, no reg or dereg op, unknown
                 mode, half an allocator); RDMAX_ERR_NO_MEMORY.
   Threads: safe. Remarks: with RDMAX_MEMHOOKS and RDMAX_MALLOPT the malloc policy is in
   force from program start (see OPTIONAL DEFINES); without them nothing process-wide is changed. */
RDMAX_API rdmax_status rdmax_rcache_create(const rdmax_rcache_desc *desc, rdmax_rcache **out);

/* rdmax_rcache_destroy
   Deregisters every live registration (cached, zombie, and still-referenced ones) and frees
   the cache (a context's own cache: rdmax_ctx_destroy does this).
   Parameters: rc, from rdmax_rcache_create.
   Result: the number of regions that still had references (0 if the caller put everything
   back); their pointers are dangling afterwards.
   Threads: no other call on rc may run or follow. */
RDMAX_API int rdmax_rcache_destroy(rdmax_rcache *rc);

/* rdmax_rcache_invalidate
   Drops every cached region overlapping [addr, addr+len): it is never returned again; unused
   ones are deregistered now, in-use ones at their last put. Use it for memory changed where no
   monitor sees it (see the manual's table of routes).
   Parameters: rc (a context's: rdmax_ctx_query_rcache); addr, len: the range (len 0: nothing).
   Result: a count: the number of regions dropped (>= 0), or RDMAX_ERR_INVALID_PARAM (rc NULL,
   or a range that wraps).
   Threads: the cache's (thread_safe: any thread; else the owner's; a context's: its thread). */
RDMAX_API int rdmax_rcache_invalidate(rdmax_rcache *rc, const void *addr, size_t len);

/* rdmax_rcache_drain
   Applies the memory events recorded by the hooks since the last drain (every get does this
   first when there are any). Parameters: rc.
   Result: a count: the number of regions dropped (>= 0), or RDMAX_ERR_INVALID_PARAM (rc NULL).
   Threads: as rdmax_rcache_invalidate. */
RDMAX_API int rdmax_rcache_drain(rdmax_rcache *rc);

/* rdmax_rcache_query_stats, rdmax_rcache_query_desc: the counters (a snapshot into *out) and the
   applied options (defaults filled in).
   Parameters: rc (not NULL). Result: none / the desc.
   Threads: any time; query_stats takes the lock in thread-safe mode (the desc never changes). */
RDMAX_API void rdmax_rcache_query_stats(rdmax_rcache *rc, rdmax_rcache_stats *out);
RDMAX_API rdmax_rcache_desc rdmax_rcache_query_desc(const rdmax_rcache *rc);

/* rdmax_rcache_memhooks: which automatic-invalidation mechanisms are active in this process.
   Parameters: none. Result: RDMAX_RCACHE_HOOKS_* bits (UFFD: the monitor thread runs in this
   process, not a parent's across fork; INTERPOSED, MALLOPT: the opt-in defines).
   Threads: any thread. */
RDMAX_API unsigned rdmax_rcache_memhooks(void);

/* The process's memory monitor (mode RDMAX_RCACHE_AUTO): whether it can run and, if not, why. */
typedef struct rdmax_rcache_monitor_info {
    int usable;         /* 1: the userfaultfd monitor can run (it starts with the first AUTO cache) */
    int running;        /* 1: its thread runs in this process */
    int user_mode_only; /* opened with UFFD_USER_MODE_ONLY (vm.unprivileged_userfaultfd=0, no privilege) */
    int error;          /* errno of the step that failed, 0 if none */
    char why[200];      /* how it was opened, or what failed and why */
    uint64_t unmap, remove, remap, other; /* events read since it started */
    uint64_t lost;      /* watched mappings a miss found replaced without an event (shmat SHM_REMAP):
                           their cached regions were invalidated, the new mapping watched */
} rdmax_rcache_monitor_info;
/* rdmax_rcache_query_monitor: whether the process's memory monitor can run, runs, and why not.
   Parameters: out (not NULL) receives the report. Result: none (out->error, out->why).
   Threads: safe. Opens the monitor's descriptors if no one has yet (not its thread). */
RDMAX_API void rdmax_rcache_query_monitor(rdmax_rcache_monitor_info *out);

/* The cache's inline calls (defined with the inline internals at the end of this file). */
/* rdmax_rcache_get
   Parameters:   rc; addr, len: the buffer (len 0 counts as 1 byte); access: flags the
                 registration must include (opaque to the cache: IBV_ACCESS_* for verbs);
                 out: receives the region, with one reference for the caller.
   Result: RDMAX_OK; RDMAX_ERR_INVALID_PARAM (rc or out NULL, a range that wraps, or the reg
                 op's -EFAULT/-EINVAL: memory that is not mapped); RDMAX_ERR_NO_MEMORY (the
                 cache's bookkeeping, or the reg op's -ENOMEM); RDMAX_ERR_IO (any other reg op
                 failure). The text, with the errno, is the thread's last error.
   Threads: see the manual. Remarks: never returns a region whose memory was invalidated.
   The hit path: no pending memory events, no lock, one lookup, a refcount increment. */
RDMAX_INLINE rdmax_status rdmax_rcache_get(rdmax_rcache *rc, const void *addr, size_t len, unsigned access,
                                           rdmax_rcache_region **out);

/* rdmax_rcache_release, rdmax_rcache_hold, rdmax_rcache_region_valid: references to a region from get.
   put drops one reference taken by get or hold. At zero the region becomes evictable (or is
   deregistered, if it was merged away, invalidated or uncached). A put on a region with no
   references is ignored. hold takes one more reference on a region the caller already holds.
   region_valid: 0 once the memory under the region was invalidated.
   Parameters: rc, the region's cache; r, a region the caller holds. Result: none / 0 or 1.
   Threads: as rdmax_rcache_get. No allocation on the common path. */
RDMAX_INLINE void rdmax_rcache_release(rdmax_rcache *rc, rdmax_rcache_region *r);

/* rdmax_rcache_hold: takes one more reference on a region the caller already holds. */
RDMAX_INLINE void rdmax_rcache_hold(rdmax_rcache *rc, rdmax_rcache_region *r);

/* rdmax_rcache_region_valid: 0 once the memory under the region was invalidated (the region
   is still registered until its last put, but its pages are not the caller's pages any more). */
RDMAX_INLINE int rdmax_rcache_region_valid(const rdmax_rcache_region *r);

/* ---- profile: variables, events, points --------------------------------------------------------- */
/* VARIABLES are the counters rdmax keeps anyway (rdmax_counters, the registration cache's stats, the
   pending queue), each a uint64_t with an id, a name, a type and a sentence:

       rdmax_profile *prof;
       rdmax_profile_create(ctx, &prof);
       const rdmax_profile_var *vars;  size_t n;
       rdmax_profile_query_vars(prof, &vars, &n);          vars[i].id == i
       uint64_t v;
       rdmax_profile_read_u64(prof, RDMAX_PROFILE_VAR_COMPLETED(RDMAX_OP_PUT), &v);
       rdmax_profile_start_reads(prof);                    one snapshot of every variable ...
       rdmax_profile_read_u64(prof, ..., &a);  rdmax_profile_read_u64(prof, ..., &b);
       rdmax_profile_end_reads(prof);                      ... read between start and end
       rdmax_profile_destroy(prof);                          before rdmax_ctx_destroy

   Reading costs the fast path nothing: the counters are plain increments that are there anyway, and the
   reader only loads them. The reader may be another thread than the context's (the context stays
   single-threaded); then every snapshot has completed <= posted for each operation type. Other pairs
   of counters have no order between them: a snapshot sees each at some instant between start and end.

   EVENTS call back when something happened on the context:
       rdmax_profile_reg_event(prof, RDMAX_PROFILE_EVENT_EP_ERROR, on_error, user);   cb NULL: unregister
   The callback runs on the context's thread, inside the rdmax call that saw the event (rdmax_progress
   for an endpoint error, the put that was refused for RDMAX_PROFILE_EVENT_SQ_FULL, ...), once per event.
   Like fi_profile(3): a callback must not block or take non-trivial time, and may only read variables
   (rdmax_profile_read_u64, start/end_reads); it must not post, progress, register, open or close. When
   nobody registered a type its events cost one load and one not-taken branch, on paths that are not
   the fast path's (an error, a refusal, a cache eviction).

   POINTS time sections of the library when every unit is compiled with -DRDMAX_PROFILE (without it they
   are not compiled at all): total time, count and average of each, printed with the variables by
   rdmax_profile_print(ctx, stdout). Times come from the TSC on x86, converted to ns at print with a rate
   measured once against CLOCK_MONOTONIC: a BEGIN/END pair costs ~17 ns natively and 60-100 ns under the
   test VM's qemu TCG, where the clock_gettime alternative costs ~1400 ns a pair (the guest has no
   usable vDSO clock: hpet, a system call per read). -DRDMAX_PROFILE_CLOCK_MONOTONIC uses clock_gettime
   anyway (33 ns a pair natively), and other CPUs always do.

   Threads: rdmax_profile_create, _close and _reg_event on the context's thread (they change what
   its calls read). A profile object's reads, start/end_reads and query may run on any one thread at a
   time, concurrently with the context's thread. rdmax_profile_print on the context's thread.
*/

typedef struct rdmax_profile rdmax_profile;

typedef enum rdmax_profile_type {
    RDMAX_PROFILE_COUNTER = 0,  /* uint64_t that only grows (a post that ibv_post_send refuses is taken back) */
    RDMAX_PROFILE_LEVEL = 1     /* uint64_t amount right now: goes up and down */
} rdmax_profile_type;

typedef struct rdmax_profile_var {
    uint32_t id;                /* what rdmax_profile_read_u64 takes; equal to the index in the list */
    rdmax_profile_type type;
    const char *name;           /* "put.posted", "rcache.hits", ...; static storage */
    const char *desc;           /* one sentence */
} rdmax_profile_var;

/* Variable ids: three per operation type (rdmax_op), then the list below. */
#define RDMAX_PROFILE_VAR_POSTED(op) ((uint32_t)(op))
#define RDMAX_PROFILE_VAR_COMPLETED(op) ((uint32_t)RDMAX_OP__COUNT + (uint32_t)(op))
#define RDMAX_PROFILE_VAR_BYTES(op) (2u * (uint32_t)RDMAX_OP__COUNT + (uint32_t)(op))

#define RDMAX__PROF_VARS(X)                                                                                \
    X(POST_CALLS, "post_calls", COUNTER, "ibv_post_send calls (one system call each on rxe)")             \
    X(RECV_POST_CALLS, "recv_post_calls", COUNTER, "ibv_post_recv calls (receive buffers go in batches)") \
    X(POLLS, "polls", COUNTER, "ibv_poll_cq calls on the send CQ")                                         \
    X(EMPTY_POLLS, "empty_polls", COUNTER, "send-CQ polls that found nothing")                            \
    X(CQES, "cqes", COUNTER, "completions taken from both CQs")                                            \
    X(RECV_MSGS, "recv_msgs", COUNTER, "messages received and handed to a receive callback")              \
    X(RECV_BYTES, "recv_bytes", COUNTER, "bytes of those messages")                                        \
    X(ERR_CQES, "err_cqes", COUNTER, "completions with an error status (flushes not counted)")            \
    X(FLUSHED_CQES, "flushed_cqes", COUNTER, "send completions flushed after their endpoint failed")       \
    X(RECV_FLUSHED, "recv_flushed", COUNTER, "receive buffers flushed after their endpoint failed")        \
    X(STALE_WR_IDS, "stale_wr_ids", COUNTER, "completions of destroyed endpoints, dropped")                \
    X(RECV_DROPS, "recv_drops", COUNTER, "received messages dropped (no receive callback, short UD, UD of no peer)") \
    X(NO_RESOURCE, "no_resource", COUNTER, "posts refused with RDMAX_ERR_NO_RESOURCE")                     \
    X(EP_ERRORS, "ep_errors", COUNTER, "endpoints moved to the error state")                               \
    X(ENDPOINTS, "endpoints", LEVEL, "endpoints of the context now")                                       \
    X(RCACHE_HITS, "rcache.hits", COUNTER, "registration cache: gets served by a cached region")           \
    X(RCACHE_MISSES, "rcache.misses", COUNTER, "registration cache: gets that registered memory")          \
    X(RCACHE_EVICTIONS, "rcache.evictions", COUNTER, "registration cache: unused regions evicted")         \
    X(RCACHE_INVALIDATIONS, "rcache.invalidations", COUNTER,                                               \
      "registration cache: regions dropped because their memory changed")                                  \
    X(RCACHE_REGIONS, "rcache.regions", LEVEL, "registration cache: live registrations now")               \
    X(RCACHE_BYTES, "rcache.bytes", LEVEL, "registration cache: bytes registered now")                     \
    X(PENDING_LENGTH, "pending.length", LEVEL, "requests waiting in the pending queue now")                \
    X(PENDING_DISPATCHES, "pending.dispatches", COUNTER, "pending requests the arbiter posted")            \
    X(UD_SKIPPED, "ud.skipped", COUNTER,                                                                   \
      "UD datagrams of a connected peer skipped in its numbering: lost, or late (ud.late)")                \
    X(UD_LATE, "ud.late", COUNTER, "UD datagrams that came after a later one (already in ud.skipped)")     \
    X(UD_DUPLICATES, "ud.duplicates", COUNTER, "UD datagrams that came twice")                             \
    X(PORT_RETRANSMITS, "port.retransmits", COUNTER, "device port: RC retransmissions after an ack timeout")  \
    X(PORT_RETRY_EXCEEDED, "port.retry_exceeded", COUNTER, "device port: RC requests that ran out of retries") \
    X(PORT_RNR_NAKS_RECEIVED, "port.rnr_naks_received", COUNTER,                                           \
      "device port: receiver-not-ready NAKs received (the peer had no receive buffer)")                    \
    X(PORT_RNR_NAKS_SENT, "port.rnr_naks_sent", COUNTER, "device port: receiver-not-ready NAKs sent")      \
    X(PORT_SEQ_NAKS_RECEIVED, "port.seq_naks_received", COUNTER,                                           \
      "device port: PSN sequence-error NAKs received (the peer missed a packet)")                          \
    X(PORT_OUT_OF_SEQ, "port.out_of_seq", COUNTER, "device port: requests received ahead of their PSN")    \
    X(PORT_DUPLICATE_REQUESTS, "port.duplicate_requests", COUNTER,                                         \
      "device port: duplicate requests received (a retransmission of what had arrived)")  \
    X(RECV_IMMS, "recv_imms", COUNTER, "puts with immediate data received")                                \
    X(EP_BYTES, "endpoint_bytes", LEVEL, "rdmax's own bytes of the live endpoints (malloc and mmap)")      \
    X(RECV_POOL_BYTES, "recv_pool.bytes", LEVEL, "bytes of the shared receive pool (RC)")                  \
    X(RECV_POOL_POSTED, "recv_pool.posted", LEVEL, "buffers of the shared receive pool posted now")        \
    X(SRQ_LIMIT_EVENTS, "srq_limit_events", COUNTER, "0: no shared receive queue (source compatibility)")     \
    X(UD_WRONG_SOURCE, "ud.wrong_source", COUNTER,                                                         \
      "UD datagrams naming an endpoint whose peer did not send them (source GID or QPN), dropped")         \
    X(WINDOW_BREAKS, "window_breaks", COUNTER, "RC endpoints failed because their peer sent past its credit window") \
    X(GRANT_WAITS, "grant_waits", COUNTER, "RC windows that would have grown but waited for the shared receive pool") \
    X(RECV_CHUNKS_FREED, "recv_pool.chunks_freed", COUNTER,                                                \
      "chunks of the shared receive pool given back (deregistered and freed) once it shrank")              \
    X(RECV_CQ_ENTRIES, "recv_cq.entries", LEVEL, "entries of the receive CQ (grows and shrinks with the RC credits)")

enum rdmax_profile_var_id {
    RDMAX__PROF_VAR_BEFORE_FIXED = 3 * RDMAX_OP__COUNT - 1,
#define RDMAX__X(id, name, type, desc) RDMAX_PROFILE_VAR_##id,
    RDMAX__PROF_VARS(RDMAX__X)
#undef RDMAX__X
    RDMAX_PROFILE_VAR__COUNT
};

/* Events. `detail` says more; `ep` is the endpoint concerned (NULL for the registration cache).
     EP_CONNECTED       ep reached RDMAX_EP_CONNECTED; detail: the peer's QP number
     EP_ERROR           ep moved to RDMAX_EP_ERROR (once per endpoint); detail: the ibv_wc_status of the
                        completion that failed it, or for a failure without an error completion of its
                        own: IBV_WC_WR_FLUSH_ERR (its QP went to the error state), IBV_WC_RETRY_EXC_ERR (the
                        watchdog: nothing completed within its bound), IBV_WC_FATAL_ERR (an asynchronous
                        QP or device error)
     EP_CLOSED          ep moved to RDMAX_EP_CLOSED; detail: 1 if the peer disconnected, 0 if this side did
     PORT_DOWN          the context's port went down (asynchronous event); ep NULL; detail: port number
     PORT_ACTIVE        the context's port is active again; ep NULL; detail: port number
     DEVICE             another asynchronous device event (device fatal, CQ error, GID change); ep NULL
                        unless it names a QP; detail: the ibv_event_type
     SQ_FULL            a post on ep was refused with RDMAX_ERR_NO_RESOURCE (each refusal, like the
                        no_resource counter); detail: RDMAX_PROFILE_NORES_*, the resource that ran out
     RCACHE_EVICT       an unused cached registration was evicted to honour a limit; detail: its bytes
     RCACHE_INVALIDATE  a cached registration was dropped because its memory changed (unmapped, or
                        rdmax_rcache_invalidate); detail: its bytes
     GRANT_WAIT         ep's window would have grown but waits for the shared receive pool (each time,
                        like grant_waits); detail: 1 if the pool is at its bound (the receive CQ's
                        max_cqe, max_srq_wr, or registering more failed), 0 if it grows at the next tick */
#define RDMAX__PROF_EVENTS(X)                                                                              \
    X(EP_CONNECTED, "ep_connected")                                                                        \
    X(EP_ERROR, "ep_error")                                                                                \
    X(SQ_FULL, "sq_full")                                                                                  \
    X(RCACHE_EVICT, "rcache_evict")                                                                        \
    X(RCACHE_INVALIDATE, "rcache_invalidate")                                                              \
    X(EP_CLOSED, "ep_closed")                                                                              \
    X(PORT_DOWN, "port_down")                                                                              \
    X(PORT_ACTIVE, "port_active")                                                                          \
    X(DEVICE, "device")                                                                                    \
    X(GRANT_WAIT, "grant_wait")

typedef enum rdmax_profile_event {
#define RDMAX__X(id, name) RDMAX_PROFILE_EVENT_##id,
    RDMAX__PROF_EVENTS(RDMAX__X)
#undef RDMAX__X
    RDMAX_PROFILE_EVENT__COUNT
} rdmax_profile_event;

/* detail of RDMAX_PROFILE_EVENT_SQ_FULL */
enum {
    RDMAX_PROFILE_NORES_SQ = 1,       /* send-queue slots of the endpoint */
    RDMAX_PROFILE_NORES_CQ = 2,       /* send-CQ entries of the context */
    RDMAX_PROFILE_NORES_PENDING = 3,  /* requests wait in the endpoint's pending queue: a post would overtake */
    RDMAX_PROFILE_NORES_CREDITS = 4,  /* RC send credits (the peer's receive buffers) */
    RDMAX_PROFILE_NORES_READS = 5     /* RDMA read / atomic budget (max_rd_atomic) */
};

typedef void (*rdmax_profile_event_cb)(rdmax_profile *prof, rdmax_profile_event type, rdmax_ep *ep,
                                       uint64_t detail, void *user);

/* Profile points (with -DRDMAX_PROFILE):
     POST        ibv_post_send (one system call on rxe)
     POLL        ibv_poll_cq of the send and the receive CQ, empty polls included
     PROGRESS    rdmax_progress, callbacks and dispatch included
     DISPATCH    the pending queue's dispatch (only when something waits)
     RCACHE_GET  rdmax_rcache_get for a buffer passed without an rdmax_mem */
#define RDMAX__PROF_POINTS(X)                                                                              \
    X(POST, "post")                                                                                        \
    X(POLL, "poll")                                                                                        \
    X(PROGRESS, "progress")                                                                                \
    X(DISPATCH, "arb_dispatch")                                                                            \
    X(RCACHE_GET, "rcache_get")

enum {
#define RDMAX__X(id, name) RDMAX__PROF_POINT_##id,
    RDMAX__PROF_POINTS(RDMAX__X)
#undef RDMAX__X
    RDMAX__PROF_POINT__COUNT
};

/* ---- profile: API ------------------------------------------------------------------------------- */

/* rdmax_profile_create, rdmax_profile_destroy: a profile object on ctx, for variables and events (see
   the profile overview above); close frees it (NULL is a no-op; from an event callback it is refused,
   logged with item PROFILE_MISUSE).
   Parameters: ctx; out receives the object.
   Result: RDMAX_OK; RDMAX_ERR_NO_MEMORY; RDMAX_ERR_INVALID_PARAM from inside an event callback.
   Threads: the context's thread. Remarks: close every profile before rdmax_ctx_destroy. */
RDMAX_API rdmax_status rdmax_profile_create(rdmax_ctx *ctx, rdmax_profile **out);
RDMAX_API void rdmax_profile_destroy(rdmax_profile *prof);

/* rdmax_profile_query_vars: every variable, vars[i].id == i; the array is static.
   Parameters: prof; vars, count receive the array and its length. Result: RDMAX_OK.
   Threads: any one reader thread at a time (see above). */
RDMAX_API rdmax_status rdmax_profile_query_vars(rdmax_profile *prof, const rdmax_profile_var **vars,
                                                size_t *count);

/* rdmax_profile_read_u64: the variable's value now, or in the snapshot while one is open.
   The port.* variables are the device's own port counters (sysfs ports/N/hw_counters, opened by
   rdmax_profile_create; within a snapshot each is read at its first read, as sysfs costs microseconds,
   so a snapshot nobody reads them from costs nothing more: never on the fast path). They
   count for the whole port, every process's QPs, since the counter was reset. A device without the
   counter (names differ: rxe's completer_retry_err is mlx5's local_ack_timeout_err, some have none) or
   with unreadable sysfs reads as RDMAX_ERR_UNSUPPORTED with *out 0, not as a silent 0.
   Result: RDMAX_OK, RDMAX_ERR_INVALID_PARAM (unknown id), RDMAX_ERR_UNSUPPORTED (not available). */
RDMAX_API rdmax_status rdmax_profile_read_u64(rdmax_profile *prof, uint32_t id, uint64_t *out);

/* rdmax_profile_start_reads / _end_reads: start takes a snapshot of every variable; reads until end
   return it. Start again (without end) takes a new one.
   Parameters: prof. Result: none. Threads: the profile's reader thread (see above). */
RDMAX_API void rdmax_profile_start_reads(rdmax_profile *prof);
RDMAX_API void rdmax_profile_end_reads(rdmax_profile *prof);

/* rdmax_profile_reg_event: call cb(prof, type, ep, detail, user) for each event of `type` on the profile's
   context; cb NULL unregisters. One callback per profile and type (a new one replaces it).
   Result: RDMAX_OK, RDMAX_ERR_INVALID_PARAM (unknown type, or called from a callback).
   Threads: the context's thread.
   rdmax_profile_event_str: the name of an event type ("ep_error", ...), a static string. */
RDMAX_API rdmax_status rdmax_profile_reg_event(rdmax_profile *prof, rdmax_profile_event type,
                                               rdmax_profile_event_cb cb, void *user);
RDMAX_API const char *rdmax_profile_event_str(rdmax_profile_event type);

/* rdmax_profile_print: the profile points as a table (status on/off, name, total seconds, count, average
   ns), then every variable as "name: value" ("name: unavailable" for a port counter the device lacks).
   Needs no profile object. Parameters: ctx; f (e.g. stdout). Result: none.
   Threads: the context's thread. */
RDMAX_API void rdmax_profile_print(rdmax_ctx *ctx, FILE *f);

/* ---- API: operations and progress (inline: defined at the end of this file) --------------------- */

/* rdmax_send: send len bytes to the peer's receive callback.
   Parameters: buf, len: the message; mem: its registration, or NULL (inline if len <= max_inline, else
   the registration cache); comp: NULL, or the completion that reports the result.
   Result: RDMAX_INPROGRESS whenever comp is given (inline or not); without comp RDMAX_OK (inline: buf is
   free now) or RDMAX_INPROGRESS; RDMAX_ERR_NO_RESOURCE (also: no send credits), RDMAX_ERR_SIZE (len
   exceeds the peer's receive buffer; UD: the path MTU), RDMAX_ERR_INVALID_PARAM (buf NULL
   and len not 0; checked before posting), other errors: nothing posted, comp unused.
   Threads: the context's thread. */
RDMAX_INLINE rdmax_status rdmax_send(rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *mem,
                                     rdmax_comp *comp);

#if RDMAX__HAS_RC
/* rdmax_put: RDMA write of len bytes to raddr/rkey of the peer.
   Parameters: buf, len, mem, comp as rdmax_send; raddr, rkey: the peer's region (rdmax_ep_query_remote).
   Result: with a comp RDMAX_INPROGRESS, inline or not; RDMAX_OK only for inline data without a comp;
   RDMAX_ERR_NO_RESOURCE; RDMAX_ERR_INVALID_PARAM (buf NULL and len not 0), RDMAX_ERR_SIZE (over the
   device's message size), RDMAX_ERR_UNSUPPORTED (UD endpoint): nothing posted, comp unused.
   Threads: the context's thread. */
RDMAX_INLINE rdmax_status rdmax_put(rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *mem,
                                    uint64_t raddr, uint32_t rkey, rdmax_comp *comp);

/* rdmax_put_imm: RDMA write with immediate data: the len bytes land at raddr/rkey of the peer, then the
   peer's imm_cb (rdmax_ep_desc.imm_cb) gets imm and len, in order with the endpoint's other operations.
   imm is yours: rdmax's credits ride elsewhere. The notice uses a receive buffer at the peer, so it takes
   a send credit like rdmax_send (RDMAX_ERR_NO_RESOURCE when none is left); len may be 0 (a notice only).
   Parameters: as rdmax_put, and imm: 32 bits for the peer's imm_cb.
   Result: as rdmax_put. Threads: the context's thread. */
RDMAX_INLINE rdmax_status rdmax_put_imm(rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *mem,
                                        uint64_t raddr, uint32_t rkey, uint32_t imm, rdmax_comp *comp);

/* rdmax_put_iov, rdmax_get_iov: gather/scatter variants of rdmax_put and rdmax_get: iov entries carry
   their own lkey; at most min(device max SGE, RDMAX_MAX_SGE). Results as rdmax_put / rdmax_get, and
   RDMAX_ERR_INVALID_PARAM for a NULL iov, a bad iovcnt or an entry with a NULL addr and a length.
   Threads: the context's thread. */
RDMAX_INLINE rdmax_status rdmax_put_iov(rdmax_ep *ep, const rdmax_iov *iov, size_t iovcnt, uint64_t raddr,
                                        uint32_t rkey, rdmax_comp *comp);

/* rdmax_get: RDMA read of len bytes from raddr/rkey into buf (inside mem). Counts against the
   negotiated max_rd_atomic budget. len 0 reads nothing: RDMAX_OK without a comp; with one, a
   zero-length write goes in its place (a zero-length read has crashed rxe), so comp still reports,
   in order with the endpoint's other operations. RDMAX_ERR_INVALID_PARAM for a NULL buf,
   RDMAX_ERR_SIZE over the device's message size, RDMAX_ERR_UNSUPPORTED on UD: all before buf is
   registered.
   Parameters: buf, len: where the data lands; mem: its registration, or NULL (the registration cache);
   raddr, rkey: the peer's region; comp: NULL, or the completion that reports the result.
   Result: RDMAX_INPROGRESS (the data is in buf once comp completes, or once rdmax_ep_flush returns);
   RDMAX_OK (len 0 without a comp); RDMAX_ERR_NO_RESOURCE (also: the read budget is spent); the errors
   above: nothing posted, comp unused.
   Threads: the context's thread. */
RDMAX_INLINE rdmax_status rdmax_get(rdmax_ep *ep, void *buf, size_t len, const rdmax_mem *mem, uint64_t raddr,
                                    uint32_t rkey, rdmax_comp *comp);
RDMAX_INLINE rdmax_status rdmax_get_iov(rdmax_ep *ep, const rdmax_iov *iov, size_t iovcnt, uint64_t raddr,
                                        uint32_t rkey, rdmax_comp *comp);

/* rdmax_fadd: fetch-and-add of add to the 8 bytes at raddr; the old value lands in *result (inside mem).
   Results: RDMAX_INPROGRESS (comp, if given, reports), RDMAX_ERR_NO_RESOURCE (also: read budget),
   RDMAX_ERR_INVALID_PARAM for a NULL result, RDMAX_ERR_UNALIGNED, RDMAX_ERR_NO_MEMH without mem,
   RDMAX_ERR_UNSUPPORTED on UD; the same for rdmax_cswap. Threads: the context's thread. */
RDMAX_INLINE rdmax_status rdmax_fadd(rdmax_ep *ep, uint64_t *result, const rdmax_mem *mem, uint64_t raddr,
                                     uint32_t rkey, uint64_t add, rdmax_comp *comp);

/* rdmax_cswap: compare-and-swap: if the 8 bytes at raddr equal compare, write swap; the old value lands
   in *result. Parameters and results as rdmax_fadd. Threads: the context's thread. */
RDMAX_INLINE rdmax_status rdmax_cswap(rdmax_ep *ep, uint64_t *result, const rdmax_mem *mem, uint64_t raddr,
                                      uint32_t rkey, uint64_t compare, uint64_t swap, rdmax_comp *comp);
#endif

/* rdmax_batch_begin: chain the following operations on ep into one post. A context chains for one
   endpoint at a time: beginning on another endpoint first posts what the previous one chained.
   Parameters: ep. Result: none. Threads: the context's thread. */
RDMAX_INLINE void rdmax_batch_begin(rdmax_ep *ep);

/* rdmax_batch_end: post what was chained since rdmax_batch_begin.
   Result: RDMAX_OK (nothing chained, or posted), or the post's error: then the chained operations
   complete with RDMAX_ERR_IO through their comps. Threads: the context's thread. */
RDMAX_INLINE rdmax_status rdmax_batch_end(rdmax_ep *ep);

/* rdmax_progress: poll receive completions (batches of 16), then send completions; run callbacks, repost
   receive buffers, then serve endpoints with pending requests (one branch when there are none); once a
   millisecond has passed also the watchdog, keepalives and device events (see FAILURES).
   Parameters: ctx. Result: the number of completions handled (>= 0).
   Threads: the context's thread. */
RDMAX_INLINE int rdmax_progress(rdmax_ctx *ctx);

/* ================================================================================================
   INLINE INTERNALS: not API. What the inline calls above need in the caller's translation unit: the
   pending queue's arbiter, the context and endpoint structs, the private prototypes, the internals of
   the registration cache and the profile, and the inline calls' definitions (their documentation is
   at their declarations above). Names with rdmax__ and the fields of these structs change without
   notice; a program reads them through the API.
   ================================================================================================ */

/* ---- arbiter: the pending queue ----------------------------------------------------------------- */
/* The pending queue of an interface. Each endpoint owns one *group* of pending elements (requests
   that found no resources); the arbiter serves the scheduled groups round-robin, so one busy endpoint
   cannot starve the others. Elements and groups are embedded in the caller's structs; the arbiter never
   allocates, so every operation is O(1) except dispatch (O(elements served)) and purge (O(group size)).

   Only groups are linked into the arbiter, never the elements behind a group's head, so the ring's size
   is the number of endpoints with work, and a visit touches one group and its head element.

     rdmax__arb
     +------------+
     | current    +---+   next group to serve; NULL: nothing scheduled (the one-branch check)
     | resched    |   |   groups that returned RESCHED, back when the dispatch returns
     | disp       |   |   what a callback did to its own group (0: nothing, that group is current)
     | hist[8]    |   |   groups visited last (prefetch hints, below)
     | hints_set  |   |   hints set since the rings last changed (near hints, below)
     | pending    |   |   elements in all groups (profiling)
     +------------+   |
                      v
          +--> +-----------+ rnext  +-----------+ rnext  +-----------+ rnext --+
          |    | group A   |------->| group B   |------->| group C   |         |
          | +--+ rprev     |<-------+ rprev     |<-------+ rprev     |<-----+  |
          | |  | head tail |        | head tail |        | head tail |      |  |
          | |  | count 3   |        | count 1   |        | count 2   |      |  |
          | |  +--+-----+--+        +--+-----+--+        +--+-----+--+      |  |
          | |     |     +-------+      |     |              |     +--+      |  |
          | |     v             v      v<----+              v        v      |  |
          | |   [a1] -> [a2] -> [a3]   [b1]                [c1] -> [c2]     |  |
          | +---------------------------------------------------------------+  |  A.rprev = C
          +--------------------------------------------------------------------+  C.rnext = A

   Elements hold one pointer, next: FIFO within the group, the last one's next is END, NULL means "not
   queued". Groups are circular and doubly linked, so schedule and desched of any group are O(1).

   Group states (rdmax__arb_group_is_scheduled / _is_desched):
     idle        not in the arbiter: never scheduled, or emptied (a group leaves when its last element goes)
     scheduled   in the ring (or parked after RESCHED, back when the dispatch returns)
     descheduled taken out by RDMAX__ARB_CB_DESCHED or rdmax__arb_group_desched() while it still has elements

   THE SCHEDULING RULE: pushing never schedules. After pushing, call rdmax__arb_group_schedule() when the
   endpoint may send (typically right after the push in pending_add, and again when the endpoint gets its
   resources back). Scheduling an empty group does nothing, scheduling a scheduled group does nothing.
   This keeps "has work" and "may run" separate: a descheduled endpoint stays out however much is pushed.

   Dispatch runs round-robin: each visit serves up to per_group elements of a group, then moves to the
   next. It goes on lap after lap until the arbiter is empty, a callback returns RDMAX__ARB_CB_STOP, or a whole
   lap removed nothing (then nothing can change, so looping would spin). A group scheduled at any time,
   also from a callback, joins the tail of the round: right behind the group being served, so every
   group already scheduled has its turn first.

   Destroying an endpoint from inside a callback (UCX PR 6401) is safe by design, without UCX's stack
   dummy element: before calling back, the dispatcher unlinks the element from its group; the group is
   arb->current while the callback runs, until the callback itself moves it. The first purge, desched
   or push_head of that group in the callback records what it did in arb->disp (0 while nothing was);
   rdmax__arb_group_purge()/_cleanup() records "gone" (no group), so after the callback returns the
   dispatcher touches neither the group nor the element: it just continues with arb->current, which
   every ring change keeps valid. The element being dispatched is
   not part of such a purge: it belongs to the running callback (which still holds it), and the arbiter
   forgets it whatever the callback returns. An element whose callback returned REMOVE is never touched
   again either, so the callback may free it or push it again (re-pushing it from its own callback is
   also fine with any other result: it counts as a new push and the old position is dropped).
   Purge and cleanup of other groups unlink them at once; the dispatcher holds no pointer to them.

   Prefetch hints: with thousands of endpoints a visit misses the cache twice (group, head element), and
   walking a ring is a chain of dependent loads that "prefetch the next group" cannot get ahead of (it
   measured no gain: 33 ns per element at 10,000 groups either way, against 4 ns at 10). So each visit
   leaves, in the group visited RDMAX__ARB_AHEAD visits earlier, a pointer to this group and to its next
   head element; the next round prefetches through them that many visits ahead, with many misses in
   flight at once (5 ns per element). Eight visits ahead measured best from 1,000 to 1,000,000
   groups (Zen 4: 16 was 1-4% slower at 1,000 groups, 8-11% at 10,000 and 6-15% at 1,000,000, 32
   slower still, 4 twice as slow from 100,000 up). With RDMAX__ARB_HINT_MIN groups or fewer the rings
   sit in the caches and the hints are left alone (a fifth of the instructions per element at 10
   groups). These far hints are only prefetched, never dereferenced, so stale ones are harmless. The
   dispatcher does write hints into the groups it visited last (arb->hist): that is why a group must
   go through rdmax__arb_group_cleanup() (or _purge()) before its memory is freed or reused, even when
   it is idle and empty.
   Near hints, with up to RDMAX__ARB_NEAR_MAX groups (rings that stay in the second-level cache): the
   dispatch loop is bound by its stores there, and writing a hint per visit costs a fifth of the time
   per element at 1,000 groups. So the hint points RDMAX__ARB_AHEAD / 2 visits ahead, and once every
   scheduled group has one set since the rings last changed (arb->hints_set, reset by every insert
   into and removal from a ring), the hints are exact: each names a group that is scheduled, so the
   dispatcher may read it (its line was prefetched that many visits ago), prefetch the group after it
   (RDMAX__ARB_AHEAD visits ahead) and that group's current head element, and write no hints at all
   until the rings change again. Reading a hint is the one thing far hints cannot afford (it would wait
   for memory from 100,000 groups up: 44 ns per element instead of 25).

   Threads: none. One arbiter and its groups belong to one thread at a time (the context's).
*/

typedef struct rdmax__arb rdmax__arb;
typedef struct rdmax__arb_group rdmax__arb_group;

/* What a dispatch callback tells the arbiter. Any other value is treated as RDMAX__ARB_CB_STOP. */
typedef enum rdmax__arb_result {
    RDMAX__ARB_CB_REMOVE = 0,   /* element done and removed; go on in this group, up to per_group */
    RDMAX__ARB_CB_NEXT_GROUP,   /* element stays at the head; next group (this one again next lap) */
    RDMAX__ARB_CB_DESCHED,      /* element stays; the endpoint is out of resources: group leaves the arbiter
                               until rdmax__arb_group_schedule() */
    RDMAX__ARB_CB_RESCHED,      /* element stays; group is served again, but not in this dispatch */
    RDMAX__ARB_CB_STOP          /* interface out of resources: element and group stay at the head, dispatch
                               returns; the next dispatch starts with this group */
} rdmax__arb_result;

/* Dispatch callback: try to run elem (of group). The element is unlinked while the callback runs. */
typedef rdmax__arb_result (*rdmax__arb_cb)(rdmax__arb *arb, rdmax__arb_group *group, rdmax__arb_elem *elem,
                                         void *arg);
/* Purge callback: elem was cancelled (already unlinked); the callback owns it now (complete, free). */
typedef void (*rdmax__arb_purge_cb)(rdmax__arb *arb, rdmax__arb_group *group, rdmax__arb_elem *elem,
                                   void *arg);

/* Embed in the endpoint. 64 bytes on LP64: give it a cache line of its own (e.g. first in a 64-byte
   aligned endpoint); dispatch prefetches it ahead, not the rest of the endpoint. Zero (or
   rdmax__arb_group_init) means idle and empty. Call rdmax__arb_group_cleanup() before freeing it. Fields
   are private. */
struct rdmax__arb_group {
    rdmax__arb_elem *head;       /* first queued element, NULL if none */
    rdmax__arb_elem *tail;       /* last queued element; stale when head is NULL */
    rdmax__arb_group *rnext;     /* ring links while scheduled (or parked after RESCHED) */
    rdmax__arb_group *rprev;
    size_t count;               /* queued elements, plus the one in a callback right now */
    rdmax__arb_group *ahead;     /* prefetch hints from the previous round: the group visited
                                   RDMAX__ARB_AHEAD (near hints: half as many) visits after this one,
                                   and its next element. Only prefetched, unless exact (see above), */
    rdmax__arb_elem *ahead_head; /* so they may be stale */
    uint32_t mark;              /* set by a callback that removed nothing (see dispatch) */
    uint8_t state;              /* RDMAX__ARB_IDLE ... */
};

#define RDMAX__ARB_AHEAD 8      /* prefetch distance in visits; a power of two */
#ifndef RDMAX__ARB_HINT_MIN      /* (tests/fuzz/arbiter_fuzz.c sets 0: its 12 groups then leave hints) */
#define RDMAX__ARB_HINT_MIN 64  /* hints only with more groups than this in the rings */
#endif
#ifndef RDMAX__ARB_NEAR_MAX
#define RDMAX__ARB_NEAR_MAX 4096 /* near hints up to this many groups in the rings, far ones beyond */
#endif
#define RDMAX__ARB_FAR 1        /* hint modes (see the manual above) */
#define RDMAX__ARB_NEAR 2

/* One per interface. Zero (or rdmax__arb_init) means empty. Fields are private. */
struct rdmax__arb {
    rdmax__arb_group *current;   /* next group to serve; NULL when nothing is scheduled */
    rdmax__arb_group *resched;   /* ring of groups that returned RESCHED in the running dispatch */
    size_t ngroups;             /* groups in the two rings */
    uintptr_t disp;             /* what the running callback did to its own group: 0 nothing (the group
                                   is arb->current), else that group with RDMAX__ARB_MOVED, _HEADS in
                                   the low bits, or RDMAX__ARB_GONE (purged) */
    rdmax__arb_elem *disp_after; /* with RDMAX__ARB_HEADS: the first element push_head'ed into that group
                                   during the callback */
    size_t pending;             /* elements queued in all groups of this arbiter */
    uint32_t mark;              /* the last lap mark used (see dispatch) */
    uint32_t hist_pos;          /* the hist entry used last (the next visit uses the one after) */
    rdmax__arb_group *hist[RDMAX__ARB_AHEAD]; /* the last groups visited, to set their ahead hints;
                                   purge clears a group from it, so every entry is alive or NULL */
    size_t hints_set;           /* near hints set since the rings last changed; RDMAX__ARB_EXACT once
                                   that is a whole round and more: every scheduled group's ahead is a
                                   scheduled group, and the hints stay as they are (see dispatch) */
    uint8_t in_dispatch;        /* a dispatch is running: a nested one returns 0 */
};

/* private */
#define RDMAX__ARB_END ((rdmax__arb_elem *)(uintptr_t)1) /* odd: no element's address */
#define RDMAX__ARB_EXACT SIZE_MAX /* arb->hints_set: the hints are exact (see dispatch) */
enum {
    RDMAX__ARB_IDLE = 0,        /* zero: a zeroed group is idle */
    RDMAX__ARB_DESCHED = 1,
    RDMAX__ARB_SCHED = 2,       /* bit 1 set: in the arbiter (ring or resched ring) */
    RDMAX__ARB_RESCHED = 3
};
/* arb->disp's low bits: the callback descheduled its own group (honour that, not its result), or
   push_head'ed into it (arb->disp_after is valid); GONE, with no group: it purged it. Any of them makes
   disp nonzero, so the dispatcher stores nothing before a callback and tests one word after it. */
#define RDMAX__ARB_MOVED ((uintptr_t)1)
#define RDMAX__ARB_HEADS ((uintptr_t)2)
#define RDMAX__ARB_DISP_FLAGS (RDMAX__ARB_MOVED | RDMAX__ARB_HEADS)
#define RDMAX__ARB_GONE RDMAX__ARB_MOVED
RDMAX_STATIC_ASSERT(__alignof__(rdmax__arb_group) > RDMAX__ARB_DISP_FLAGS,
                    "rdmax: arb->disp's flags live in a group address's low bits");
RDMAX_STATIC_ASSERT(__alignof__(rdmax__arb_elem) > 1, "rdmax: RDMAX__ARB_END must be no element's address");

/* ---- arbiter: out-of-line API ------------------------------------------------------------------- */

/* rdmax__arb_group_push_head: queue elem in front of every element of group, e.g. a flow-control grant
   that must go first to avoid a deadlock. Does not schedule (see the rule above). If group's element is
   in a callback right now and the callback keeps it, it goes back right behind the first element
   push_head'ed during that callback, so the pushed element still goes first.
   Parameters: elem must not be queued (rdmax__arb_elem_is_queued() false).
   Threads: none (owner thread). O(1). */
RDMAX_API void rdmax__arb_group_push_head(rdmax__arb *arb, rdmax__arb_group *group, rdmax__arb_elem *elem);

/* rdmax__arb_group_desched: take a scheduled group out of the arbiter (endpoint out of resources); its
   elements stay queued and it becomes "descheduled". No effect on an idle or descheduled group. Called
   from a callback on its own group, it wins over the callback's result (except STOP, which still stops).
   Threads: none. O(1). */
RDMAX_API void rdmax__arb_group_desched(rdmax__arb *arb, rdmax__arb_group *group);

/* rdmax__arb_group_purge: cancel every queued element of group, head to tail: each is unlinked, then cb
   (if not NULL) gets it and owns it. The group leaves the arbiter and is idle and empty afterwards.
   Safe at any time, also from a dispatch callback, on its own group or another one; the element being
   dispatched is not cancelled (its callback owns it, see above). cb may push (a pushed element is not
   cancelled) but must not free the group or touch elements it was not given; free the group after
   purge returns.
   Threads: none. O(elements). */
RDMAX_API void rdmax__arb_group_purge(rdmax__arb *arb, rdmax__arb_group *group, rdmax__arb_purge_cb cb,
                                     void *arg);

/* rdmax__arb_group_cleanup: forget group before its memory is freed (endpoint destroy): purge without a
   callback, so queued elements are dropped (the caller owns them; they are marked not queued, so they
   must still be valid memory). Required before freeing or re-initialising any group that was ever
   dispatched, idle or not: the dispatcher may still hold it as a prefetch-hint target. Afterwards the
   memory may be freed or re-initialised, also from inside a dispatch callback on this very group.
   Threads: none. O(elements). */
RDMAX_API void rdmax__arb_group_cleanup(rdmax__arb *arb, rdmax__arb_group *group);

/* private: rdmax__arb_dispatch() once the arbiter is not empty */
RDMAX_API size_t rdmax__arb_dispatch_nonempty(rdmax__arb *arb, unsigned per_group, rdmax__arb_cb cb,
                                              void *arg);

/* ---- arbiter: inline API ------------------------------------------------------------------------ */

/* rdmax__arb_init / rdmax__arb_group_init / rdmax__arb_elem_init: same as zeroing. A group and its
   elements are used with one arbiter from init to cleanup; init a group only when it is new or after
   rdmax__arb_group_cleanup().
   The queries below (rdmax__arb_is_empty, _pending, rdmax__arb_group_count, _is_empty, _is_scheduled,
   _is_desched, rdmax__arb_elem_is_queued, rdmax__arb_group_first, rdmax__arb_elem_next) read only, O(1).
   Parameters: non-NULL objects. Threads (all): none: the arbiter's owner thread. */
RDMAX_INLINE void rdmax__arb_init(rdmax__arb *arb)
{
    arb->current = NULL;
    arb->resched = NULL;
    arb->ngroups = 0;
    arb->disp = 0;
    arb->disp_after = NULL;
    arb->pending = 0;
    arb->mark = 0;
    arb->hist_pos = 0;
    for (int i = 0; i < RDMAX__ARB_AHEAD; i++) {
        arb->hist[i] = NULL;
    }
    arb->hints_set = 0;
    arb->in_dispatch = 0;
}

RDMAX_INLINE void rdmax__arb_group_init(rdmax__arb_group *group)
{
    group->head = NULL;
    group->tail = NULL;
    group->rnext = NULL;
    group->rprev = NULL;
    group->count = 0;
    group->ahead = NULL;
    group->ahead_head = NULL;
    group->mark = 0;
    group->state = RDMAX__ARB_IDLE;
}

RDMAX_INLINE void rdmax__arb_elem_init(rdmax__arb_elem *elem)
{
    elem->next = NULL;
}

/* rdmax__arb_is_empty: true when no group is scheduled: the progress path's one branch. */
RDMAX_INLINE bool rdmax__arb_is_empty(const rdmax__arb *arb)
{
    return arb->current == NULL;
}

/* rdmax__arb_pending: elements queued in all groups (scheduled or not) of this arbiter. O(1). */
RDMAX_INLINE size_t rdmax__arb_pending(const rdmax__arb *arb)
{
    return arb->pending;
}

/* rdmax__arb_group_count: elements queued in group; inside a callback on group it includes the element
   being dispatched. O(1). */
RDMAX_INLINE size_t rdmax__arb_group_count(const rdmax__arb_group *group)
{
    return group->count;
}

RDMAX_INLINE bool rdmax__arb_group_is_empty(const rdmax__arb_group *group)
{
    return group->count == 0;
}

/* rdmax__arb_group_is_scheduled: in the arbiter, or parked after RESCHED and back when dispatch returns. */
RDMAX_INLINE bool rdmax__arb_group_is_scheduled(const rdmax__arb_group *group)
{
    return (group->state & RDMAX__ARB_SCHED) != 0;
}

/* rdmax__arb_group_is_desched: taken out by DESCHED or rdmax__arb_group_desched() and not empty; stays so
   until rdmax__arb_group_schedule() or a purge. */
RDMAX_INLINE bool rdmax__arb_group_is_desched(const rdmax__arb_group *group)
{
    return group->state == RDMAX__ARB_DESCHED;
}

/* rdmax__arb_elem_is_queued: elem waits in a group (false while its callback runs). */
RDMAX_INLINE bool rdmax__arb_elem_is_queued(const rdmax__arb_elem *elem)
{
    return elem->next != NULL;
}

/* rdmax__arb_group_first / rdmax__arb_elem_next: walk a group's queue head to tail (NULL at the end), for
   flush checks, dumps and tests. Do not push or purge while walking. */
RDMAX_INLINE rdmax__arb_elem *rdmax__arb_group_first(const rdmax__arb_group *group)
{
    return group->head;
}

RDMAX_INLINE rdmax__arb_elem *rdmax__arb_elem_next(const rdmax__arb_elem *elem)
{
    return elem->next == RDMAX__ARB_END ? NULL : elem->next;
}

/* rdmax__arb_group_push: queue elem at the tail of group (a pending request). Does not schedule: call
   rdmax__arb_group_schedule() when the endpoint may send (see the rule above).
   Parameters: elem must not be queued already (debug assert; it would corrupt both queues).
   Threads: none. O(1), no allocation. */
RDMAX_INLINE void rdmax__arb_group_push(rdmax__arb *arb, rdmax__arb_group *group, rdmax__arb_elem *elem)
{
    RDMAX_ASSERT(elem->next == NULL);
    elem->next = RDMAX__ARB_END;
    if (group->head != NULL) {
        group->tail->next = elem;
    } else {
        group->head = elem;
    }
    group->tail = elem;
    group->count++;
    arb->pending++;
}

/* private: link g in front of *ring (one of arb's), i.e. at the tail of the round */
RDMAX_INLINE void rdmax__arb_ring_insert(rdmax__arb *arb, rdmax__arb_group **ring, rdmax__arb_group *g)
{
    rdmax__arb_group *first = *ring;
    arb->ngroups++;
    arb->hints_set = 0; /* the ring order changed: hints are guesses again */
    if (first == NULL) {
        g->rnext = g;
        g->rprev = g;
        *ring = g;
    } else {
        g->rnext = first;
        g->rprev = first->rprev;
        first->rprev->rnext = g;
        first->rprev = g;
    }
}

/* private: unlink g from *ring (one of arb's); if g was the ring's first, its successor becomes first */
RDMAX_INLINE void rdmax__arb_ring_remove(rdmax__arb *arb, rdmax__arb_group **ring, rdmax__arb_group *g)
{
    arb->ngroups--;
    arb->hints_set = 0;
    if (g->rnext == g) {
        *ring = NULL;
    } else {
        g->rprev->rnext = g->rnext;
        g->rnext->rprev = g->rprev;
        if (*ring == g) {
            *ring = g->rnext;
        }
    }
}

/* rdmax__arb_group_schedule: let group take part in dispatch, at the tail of the round (every scheduled
   group goes first). No effect if it is empty or already scheduled. Safe from a dispatch callback.
   Threads: none. O(1). */
RDMAX_INLINE void rdmax__arb_group_schedule(rdmax__arb *arb, rdmax__arb_group *group)
{
    if ((group->state & RDMAX__ARB_SCHED) || group->count == 0) {
        return;
    }
    rdmax__arb_ring_insert(arb, &arb->current, group);
    group->state = RDMAX__ARB_SCHED;
}

/* rdmax__arb_dispatch: serve the scheduled groups round-robin, up to per_group elements per group per
   turn, calling cb for each group's head element (see rdmax__arb_result), until the arbiter is empty,
   cb returns RDMAX__ARB_CB_STOP, or a whole lap removed nothing.
   Parameters: per_group 0 means 1 (strict round-robin, what RC and UD use). cb may push, push_head,
   schedule, desched, purge and cleanup any group, including its own (see above), but not dispatch: a
   nested dispatch returns 0 and does nothing.
   Result: how many callbacks returned RDMAX__ARB_CB_REMOVE.
   Threads: none. An empty arbiter costs one load and one branch. */
RDMAX_INLINE size_t rdmax__arb_dispatch(rdmax__arb *arb, unsigned per_group, rdmax__arb_cb cb, void *arg)
{
    if (rdmax_likely(arb->current == NULL)) {
        return 0;
    }
    return rdmax__arb_dispatch_nonempty(arb, per_group, cb, arg);
}

/* ---- internal types the inline fast paths touch (do not use their fields directly) -------------- */
typedef struct rdmax__slot {
    rdmax_comp *comp;
    struct rdmax_rcache_region *region; /* cached registration held until completion */
    uint32_t len;
    uint8_t op;
    uint8_t signaled;
    uint16_t zero;              /* 0: written with op and signaled as one word (rdmax__slot_op) */
    uint64_t raddr;             /* for the error report */
} rdmax__slot;

/* A slot of the endpoint table that wr_ids index. key: the high half of the endpoint's wr_ids, generation
   << 16 | index (RDMAX__EP_KEY) while ep is set; with RDMAX__EP_KEY_FREE added while the slot is free,
   which keeps the last generation (the next one follows it) and matches no completion (its status, the
   key's high half, is below 2^31). A zeroed slot is free too: a generation is never 0 (rdmax__ep_alloc
   skips it). So one compare of the 8 bytes after a completion's wr_id's low half (the high half, then
   the status: rdmax__wc_key) against the key tests success, presence and generation (rdmax__send_cqes). */
typedef struct rdmax__ep_ref {
    rdmax_ep *ep;
    uint64_t key;
} rdmax__ep_ref;
#define RDMAX__EP_KEY(gen, idx) ((uint64_t)(gen) << 16 | (uint64_t)(idx))
#define RDMAX__EP_KEY_FREE (1ull << 63)
#define RDMAX__REF_GEN(ref) ((uint16_t)((ref)->key >> 16))

/* One request of a post list in the context's staging (rdmax_ctx.chain_entries). Set at creation and kept: the
   request's next (the next entry's request; the last entry's is NULL), its sg_list (sge), one SGE
   pointing at inl, opcode RDMA write, inline, unsignaled - a chained put of 8 to 16 bytes
   (rdmax__put_chain) then writes only its data into inl, the length and the remote fields; the low half
   of the wr_id (its send slot) is written when the room closes (rdmax__room_settle; the high half names
   the chaining endpoint: rdmax_ctx.chain_hi). The general path changes the other fields of the entries
   it takes (rdmax_ctx.chain_dirty). */
#define RDMAX__CHAIN_ENTRY_USED (sizeof(struct ibv_send_wr) + RDMAX_MAX_SGE * sizeof(struct ibv_sge) + 16)
typedef struct rdmax__chain_entry {
    struct ibv_send_wr wr;
    struct ibv_sge sge[RDMAX_MAX_SGE];
    uint64_t inl[2];            /* a chained short put's data (the buffer is promised free at once) */
    /* to 512 bytes (with RDMAX_MAX_SGE up to 23): a chained put finds its entry with one shift */
    char pad[RDMAX__CHAIN_ENTRY_USED < 512 ? 512 - RDMAX__CHAIN_ENTRY_USED : 8];
} rdmax__chain_entry;

#define RDMAX__WR_RECV (1ull << 31)
/* Byte offset of a wr_id's low 32 bits (the slot of a send request). rdmax's own immediate data
   (credits, grant and close flags; UD's endpoint index and datagram number) travels little-endian, so
   the common hosts swap no bytes: RDMAX__LE32 both ways. A user's immediate (rdmax_put_imm) travels in
   network order. */
#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define RDMAX__WR_ID_LO 4
#define RDMAX__WR_ID_HI 0
#define RDMAX__LE32(x) __builtin_bswap32(x)
#else
#define RDMAX__WR_ID_LO 0
#define RDMAX__WR_ID_HI 4
#define RDMAX__LE32(x) ((uint32_t)(x))
#endif
#define RDMAX__WR_SLOT_MASK 0x7fffffffull
/* A send request whose comp has a callback (rdmax__ep_post): the bit in its wr_id's low half keeps its
   completion from matching the fast retire's slot compare (rdmax__send_cqe_fast), so the callback runs
   where user code may (rdmax__send_cqes_slow), and the fast retire tests no callback. */
#define RDMAX__WR_CB (1ull << 30)
#define RDMAX__WR_SEND_SLOT_MASK (RDMAX__WR_SLOT_MASK & ~RDMAX__WR_CB)

/* A post's slot takes its op and signaled = 0 in one 32-bit store (a 16-bit immediate costs x86 a
   register or a decoder stall), the signaled post sets the flag after it; so no free slot needs
   clearing: retirement leaves the flag as it was. */
RDMAX_STATIC_ASSERT(offsetof(rdmax__slot, signaled) == offsetof(rdmax__slot, op) + 1 &&
                    offsetof(rdmax__slot, zero) == offsetof(rdmax__slot, op) + 2 && offsetof(rdmax__slot, op) % 4 == 0,
                    "rdmax: rdmax__slot_op stores op, signaled and zero as one 32-bit word");
RDMAX_INLINE void rdmax__slot_op(rdmax__slot *s, unsigned op)
{
#if RDMAX__WR_ID_HI == 4 /* little-endian: op is the low byte */
    uint32_t w = op;
#else
    uint32_t w = op << 24;
#endif
    memcpy(&s->op, &w, 4);
}
/* rdmax_ctx.lazy_polls's step: the counter wraps to 0 every 4th one, so "every 4th call" is one add and
   its zero flag (rdmax__progress_send) */
#define RDMAX__LAZY_STEP (1u << 30)
/* rdmax_ctx.comps_out's nesting flag (its sign bit; the count stays far below it) */
#define RDMAX__SCQ_NEST 0x80000000u
#define RDMAX__SCQ_NESTED(ctx) ((int32_t)(ctx)->comps_out < 0)

/* The fast paths' prebuilt requests in the context, one per kind (rdmax_ctx.fast_wr); the put's is each
   endpoint's own (rdmax_ep.wr) */
#define RDMAX__FWR_SEND 0
#define RDMAX__FWR_GET 1
#define RDMAX__FWR_FADD 2
#define RDMAX__FWR_CSWAP 3
#define RDMAX__FWR__COUNT 4

struct rdmax_ctx {
    rdmax__arb arb;              /* endpoints with pending requests, served round-robin */
    rdmax_ep *disp_ep;          /* endpoint whose pending request is being dispatched */
    struct ibv_context *verbs;
    struct ibv_pd *pd;
    struct ibv_cq *scq, *rcq;
    /* the provider's poll_cq of scq and rcq, what ibv_poll_cq calls (cq->context->ops.poll_cq, set when
       the device is opened): read once at creation, one load less per poll; rcq_poll polls every receive
       CQ once a context has more than one (rdmax__rgroups_poll, >>pools) */
    int (*scq_poll)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
    int (*rcq_poll)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask); /* ibv_modify_qp (tests: fake) */
    struct ibv_wc *rwc;         /* where rdmax_progress polls the receive CQ into: rwc_top, or while
                                   the receive path runs callbacks (which may progress) an array in its
                                   frame, so the inline poll needs no array of its own */
    struct ibv_comp_channel *channel;
    int32_t scq_spare;          /* send-CQ entries not yet reserved by a post, minus scq_low
                                   (rdmax__scq_free): the fast post's signal test is then one decrement
                                   and one sign test */
    uint32_t scq_low;           /* below this many free entries every progress call polls (drains) the send
                                   CQ and every post is signaled */
    int32_t scq_idle;           /* scq_spare when nothing is outstanding and the send CQ is known empty
                                   (INT32_MIN after a destroy left completions behind, until a tick
                                   drained them): progress then does not poll it */
    uint32_t rcq_drains;        /* receive-CQ polls that found it drained (the epoch of >>srq) */
    uint32_t comps_out;         /* posted operations whose rdmax_comp has not completed, plus
                                   RDMAX__SCQ_NEST while rdmax__send_cqes_slow handles send completions
                                   (the only place user code runs amid a batch): a comp callback that
                                   progresses must not poll the send CQ (its completions would retire
                                   ahead of the batch's rest, which RC's in-order retirement forbids).
                                   One signed test then reads "comps out and not nested" (progress) */
    uint32_t rcq_size, rq_total; /* receive CQ entries, and receive requests all endpoints may post */
    uint32_t n_eps;
    uint32_t prof_event_mask;   /* profile events someone registered for (rdmax__profile_wants) */
    uint32_t tick_at;           /* rdmax__tick_clock() from which progress calls rdmax__tick_due */
    uint32_t tick_clock_ms;     /* rdmax__tick_clock() units per ms (at least 1), measured once */
    int64_t clock_skew_ms;      /* added to the health pass's clock: 0, but for rdmax__test_clock_advance */
    uint32_t lazy_polls;        /* progress calls that may skip the send CQ, in steps of RDMAX__LAZY_STEP */
    int64_t next_tick_ms;       /* next watchdog and keepalive pass */
    int64_t tick_coarse_ms;     /* the coarse clock at the last tick from progress (rdmax__tick_due) */
    int64_t port_down_ms;       /* when the port last went down (0: never), for error messages */
    int64_t last_pass_ms;       /* the last watchdog pass */
    uint8_t port_up;
    uint8_t dev_dead;           /* the device reported a fatal error */
    uint8_t flush_check;        /* an endpoint saw a flushed completion before failing (rdmax__flush_check) */
    uint8_t state_news;         /* an endpoint with a state_cb failed or closed (rdmax__state_tell) */
    uint8_t held_news;          /* an accept call took an endpoint with held messages (rdmax__cm_hold_tell) */
    uint8_t in_flush_check;
    uint8_t cm_gone;            /* endpoints wait for the verdict on a DISCONNECTED (rdmax__cm_verdicts) */
    uint64_t retire_step[RDMAX_OP__COUNT]; /* by op, what the fast retire adds to an endpoint's rd_avail
                                   and sq_tail as one word: sq_tail 1, rd_avail 1 for the reads and
                                   atomics, whose retirement gives back read budget (rdmax__ctx_retire_step) */
    rdmax__ep_ref *eps;         /* table that wr_ids index: [eps_mask + 1], the slots past eps_cap free */
    uint32_t eps_cap, eps_hint; /* slots in use or free to use (grows up to max_eps); where the search for
                                   a free slot starts */
    uint32_t eps_mask;          /* the table's size (a power of two) - 1: a completion's index, masked,
                                   is in the table without a bounds test (rdmax__send_cqe_fast) */
    uint64_t ep_bytes;          /* rdmax's own bytes of the live endpoints (malloc and mmap) */
    struct rdmax__rx *rx;       /* RC: shared receive queues and their pools; NULL until the first RC endpoint */
    struct rdmax__dev *dev;     /* the device and protection domain, shared with parent and children */
    rdmax_ctx *dev_next;        /* the next context sharing dev (under dev->lock) */
    rdmax_counters cnt;         /* cnt.post_calls: ibv_post_send calls minus the requests in posted[] (a
                                   request of its own is no update; rdmax_ctx_query_counters adds them up);
                                   cnt.bytes[] of FADD and CSWAP: not kept (8 x posted, there) */
    rdmax_ctx_desc desc;        /* applied values */
    rdmax_dev_attr attr;
    rdmax_log_level log_level;
    rdmax_log_item last_error_item;
    char last_error[512];
    struct ibv_wc wc[16];       /* the send CQ's batch (rdmax__poll_send_fast) */
    struct ibv_wc rwc_top[17];  /* the receive CQ's batch of an outermost rdmax_progress (rwc); a callback
                                   of rdmax__progress_recv_one's single message polls into [1, 17) */
    /* Chained requests of the one endpoint that batches (rdmax_batch_begin), staged here rather than in
       every endpoint: chain_entries[0 .. batch_n), and while a room is open chain_entries[0 .. chain_next - chain_entries). */
    rdmax_ep *batch_ep;
    rdmax_ep *dead_eps;         /* destroyed inside a receive poll, their own receive buffers kept (one
                                   may be a callback's data): freed at the end of the outermost poll */
    uint32_t batch_n;           /* while a room is open: its first entry (chain_base); rdmax__chain_close
                                   sets it to the entries chained */
    uint32_t chain_base;        /* the first entry of the open room */
    rdmax__chain_entry *chain_next;    /* the open room (rdmax__chain_open, rdmax__chain_close): short puts chain */
    rdmax__chain_entry *chain_end;     /* into *chain_next while chain_next != chain_end (both NULL: no room) */
    uint32_t chain_cq_free_at_open;          /* free send-CQ entries when the room opened */
    uint32_t chain_dirty;       /* entries below it may have had their set fields changed by the general
                                   path: rdmax__chain_clean sets them again */
    uint32_t chain_hi;          /* the high half of the wr_id in every entry from chain_dirty on (the
                                   endpoint whose room opened last: rdmax__chain_open) */
    uint32_t chain_nsig;        /* entries in chain_sig: short puts signaled by rdmax__chain_close, whose
                                   flags are set back after the post */
    uint32_t chain_sig[RDMAX_BATCH_MAX];
    char *inl_stage;            /* [RDMAX_BATCH_MAX][attr.max_inline]: inline data of chained requests the
                                   general path stages (a chained short put's goes in its entry) */
    rdmax__chain_entry chain_entries[RDMAX_BATCH_MAX];
    struct rdmax_rcache *rcache; /* NULL when disabled */
    struct rdmax__prof *prof;   /* profile points, event callbacks, log dedupe; NULL until used */
    struct rdma_event_channel *cm_ch; /* RDMAX_SETUP_CM: events of the endpoints' rdma_cm ids */
    rdmax_listener *listeners;  /* open listeners, closed by rdmax_ctx_destroy */
    uint8_t *secret;            /* admission (rdmax_impl.h >>admit): our copy of desc.secret_len bytes,
                                   wiped at destroy; NULL: none */
    /* The requests of the fast paths (RDMAX__FWR_*): opcode, flags, one SGE (fsge) and next NULL are
       set at creation, so a post fills only the fields that change (a signaled one sets and restores
       IBV_SEND_SIGNALED out of line). The provider copies a request at the post. */
    struct ibv_send_wr fast_wr[RDMAX__FWR__COUNT];
    struct ibv_send_wr general_wr;     /* the general path's request (rdmax__ep_wr), its SGEs the endpoint's */
    struct ibv_sge fsge;
    struct ibv_sge asge;        /* the atomics' SGE: length 8 set at creation */
#if RDMAX__HAS_UD
    struct rdmax__ud *ud;
#endif
    struct ibv_ah *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr); /* ibv_create_ah (tests: fake) */
    uint8_t said_sq_clamp;      /* the log said once that a send queue was clamped to the device */
    struct in_addr mcast_addr;  /* rdmax_ctx_desc.mcast_addr parsed; 0: derived at each join */
};

struct rdmax_ep {
    rdmax__arb_group group;      /* pending requests; first, on its own cache line for the arbiter */
    rdmax_ctx *ctx;
    struct ibv_qp *qp;
    /* the provider's post_send, what ibv_post_send calls (qp->context->ops.post_send): read at creation,
       one load less per post */
    int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
    uint64_t wr_id_base;        /* generation << 48 | table index << 32 */
    uint8_t state;              /* rdmax_ep_state */
    uint8_t blocked;            /* RDMAX__BLK_*: why a direct post may not take the fast path */
    uint16_t sq_regions;        /* outstanding slots holding a cached registration (sq_depth <= 32768):
                                   with state and blocked one word that the fast retire tests once
                                   (rdmax__ep_retire_word) */
    uint32_t sq_mask;           /* the slots less one: sq_depth rounded up to a power of two, less one */
    uint32_t rd_avail;          /* RDMA reads and atomics that may still be issued; with sq_tail one 8-byte
                                   word that the fast retire adds its step to (rdmax_ctx.retire_step) */
    uint32_t sq_tail;           /* oldest outstanding slot */
    uint32_t sq_head;           /* next slot to fill */
    uint32_t fast_gate;         /* the fast gate: sig_at, or sq_head while blocked */
    uint32_t sig_at;            /* sq_head of the next post that must be signaled: one in signal_interval,
                                   or the queue's end (sq_tail + sq_depth) if nearer (rdmax__sig_next);
                                   never behind sq_head (short puts chained in a room take their slots,
                                   and move sq_head, only when it closes: rdmax__chain_close) */
    uint32_t signal_interval;
    uint32_t max_inline;
    uint32_t peer_recv_size;    /* largest message the peer accepts */
    uint32_t send_inline;       /* RC: min(max_inline, peer_recv_size), the fast send's one length test
                                   (0 until connected, and on UD) */
    uint32_t tx_credits;        /* RC: receive buffers the peer has for us: sends may take all but the
                                   last, kept for grants and the goodbye (so the fast test is > 1) */
    uint32_t rx_unreturned;     /* receive buffers reposted but not yet granted back to the peer */
    uint32_t sq_last;           /* sq_depth - 1: the requests the queue holds, less one (sq_depth need not
                                   be a power of two: sq_mask + 1 slots, up to sq_last + 1 outstanding) */
    rdmax_req grant_req;        /* a grant that could not be posted waits at the head of the queue */
    rdmax__slot *slots;
    struct ibv_send_wr wr;      /* the fast put's request, prebuilt at creation and never changed but
                                   for remote_addr, rkey and the low half of wr_id (the slot): opcode
                                   RDMA_WRITE, IBV_SEND_INLINE, one SGE (ctx->fsge), next NULL, the high
                                   half of wr_id this endpoint's (wr_id_base). The general path builds
                                   its requests in ctx->general_wr */
    struct ibv_send_wr *post_bad;
    struct ibv_sge sge[RDMAX_MAX_SGE];
    rdmax_rbuf *remote;         /* the peer's advertised regions (n_remote of them; NULL: none) */
    rdmax_rbuf *local;          /* ours, copied from the desc at creation (n_local of them) */
    uint32_t n_remote, n_local;
    rdmax_recv_cb recv_cb;      /* never NULL: rdmax__recv_drop when the desc has none */
    void *user;
    rdmax_imm_cb imm_cb;
    uint32_t grant_at;          /* RC: grant when this many credits are owed (half the window) */
    uint32_t pool;              /* RC: the receive pool its peer's messages land in */
    uint32_t rx_n;              /* RC on a pool: the pool's buffers it owns, its own receive queue's (>>srq) */
    /* a receive pool of its own: none (rbufs NULL) on the shared receive queue or the context's UD QP.
       RC: rq_depth is the buffers that back the peer, the window + 1 (the credits in our record) */
    char *rbufs;
    struct ibv_mr *rmr;
    uint32_t rq_depth, recv_size, rq_unposted;
    uint16_t rx_sq_seen;        /* RC, a window that grew: sq_head's low bits when the receive path last
                                   looked (a post since then, not a grant: the peer gets replies) */
    uint16_t rx_grants;         /* RC: grants received since the window last adapted (owed back like
                                   messages, but no sign that the peer streams) */
    uint32_t *rq_free;
    /* error report */
    int last_wc_status;
    int last_errno;
    rdmax_ep_desc desc;         /* applied values */
    char peer[64];              /* peer's out-of-band address, for messages */
    uint32_t peer_qpn;
    uint8_t peer_gid[16];       /* the RoCE peer, for messages */
    int16_t err;                /* rdmax_status that failed or closed the endpoint */
    uint8_t flush_seen;
    uint8_t state_told;         /* the state last given to desc.state_cb (rdmax__state_tell) */
    uint8_t shared_qp;          /* UD: qp is the context's */
    uint8_t rx_looks;           /* RC, a window that grew: its settles, of which rdmax__window_adapt looks
                                   at every 8th (rdmax__grant_due) */
    uint16_t peer_lid;          /* InfiniBand: the peer's LID (a UD datagram without a GRH is checked by it) */
    uint32_t wd_tail;           /* watchdog: sq_tail when last seen moving, at wd_ms */
    int64_t wd_ms;
    uint32_t ka_head;           /* keepalive: sq_head when last seen moving, at ka_ms */
    uint32_t n_wins;            /* (here: in ka_head's padding; scale_test holds an endpoint to 2 KiB) */
    int64_t ka_ms;
    struct rdma_cm_id *cm_id;   /* RDMAX_SETUP_CM: the connection's rdma_cm id (it has no QP: ours is ep->qp) */
    uint32_t cm_gone_epoch;     /* RDMAX_SETUP_CM: the receive CQs' drain epoch at the peer's DISCONNECTED,
                                   whose verdict waits for them (cm_gone set; rdmax__cm_verdicts) */
    uint8_t cm_gone;
    uint8_t bye;                /* RC: rdmax_ep_disconnect posted our goodbye and has not returned */
    uint8_t in_call;            /* depth of its own rdmax_ep_flush and rdmax_ep_disconnect, which progress
                                   inside: state_cb waits until they return (rdmax__state_tell) */
    uint8_t destroyed;          /* a callback destroyed it inside such a call, or inside a receive poll
                                   while it has buffers of its own: freed later (rdmax_ep_destroy) */
    struct rdmax_ep *dead_next; /* destroyed inside a receive poll: the next on ctx->dead_eps */
    struct rdmax__win *wins;    /* RC: the memory windows of the regions it exposes (n_wins; EXPOSED MEMORY) */
#if RDMAX__HAS_UD
    struct ibv_ah *ah;          /* UD: the peer's address handle (from the context's cache) */
    uint32_t ud_qpn, ud_qkey;
    struct rdmax__mcast *mcast; /* UD: groups this endpoint joined */
    uint16_t ud_rx_next;        /* UD: the number of the peer's next datagram (see rdmax_send) */
    uint64_t ud_rx_seen;        /* UD: bit k: datagram ud_rx_next - 1 - k came */
#endif
    struct rdmax__hold *hold;   /* RDMAX_SETUP_CM: what the peer sent before the accept call that returns
                                   the endpoint (>>cm); NULL: nothing held */
};

/* ---- private prototypes (the out-of-line ends of the inline calls) ------------------------------ */

/* rdmax__tick: the low-rate slow path (device events, watchdog, keepalive). rdmax_progress calls
   rdmax__tick_due once a millisecond has passed since its last call (ctx->tick_at), which runs the tick
   at most once per step of the coarse clock (1-4 ms). */
RDMAX_API void rdmax__tick(rdmax_ctx *ctx);
RDMAX_API void rdmax__tick_due(rdmax_ctx *ctx);
RDMAX_API rdmax_status rdmax__post_chain(rdmax_ep *ep, int last_is_callers);
RDMAX_API void rdmax__batch_begin(rdmax_ep *ep);
RDMAX_API rdmax_status rdmax__batch_end(rdmax_ep *ep);
RDMAX_API size_t rdmax__dispatch(rdmax_ctx *ctx);
RDMAX_API int rdmax__dispatch_then(rdmax_ctx *ctx, int n);     /* rdmax__dispatch, then returns n */
RDMAX_API int rdmax__progress_more(rdmax_ctx *ctx, int n);     /* rdmax_progress after n receives */
RDMAX_API int rdmax__progress_recv(rdmax_ctx *ctx, int n);     /* rdmax_progress after its poll found n */

/* Progress and registration slow paths. */
RDMAX_API rdmax_status rdmax__rcache_open(rdmax_ctx *ctx);
RDMAX_API rdmax_status rdmax__rcache_check(rdmax_ctx *ctx);
RDMAX_API int rdmax__poll_send(rdmax_ctx *ctx);
RDMAX_API int rdmax__send_cqes(rdmax_ctx *ctx, uint64_t n);     /* n: 1 to 16 send completions in ctx->wc */
RDMAX_API int rdmax__progress_cqes(rdmax_ctx *ctx, uint64_t n);  /* rdmax__send_cqes, then the pending queue */
RDMAX_API int rdmax__progress_one(rdmax_ctx *ctx);               /* rdmax__progress_cqes of one completion */
RDMAX_API int rdmax__poll_recv(rdmax_ctx *ctx);
RDMAX_API int rdmax__recv_cqes(rdmax_ctx *ctx, int n);
RDMAX_API int rdmax__poll_ud(rdmax_ctx *ctx);
/* private: slow paths of the inline functions, and a consistency check for tests (returns 0
   when every invariant holds, else a negative number naming the check that failed) */
RDMAX_API rdmax_status rdmax__rcache_get_slow(rdmax_rcache *rc, const void *addr, size_t len, unsigned access,
                                              rdmax_rcache_region **out);
RDMAX_API void rdmax__rcache_release_slow(rdmax_rcache *rc, rdmax_rcache_region *r);
RDMAX_API void rdmax__rcache_hold_slow(rdmax_rcache *rc, rdmax_rcache_region *r);
RDMAX_API int rdmax__rcache_validate(rdmax_rcache *rc);

/* ---- rcache: internals (region flags, the page table, the cache) -------------------------------- */

/* region flags (private) */
#define RDMAX__RCACHE_IN_LOOKUP 1u /* visible to lookups */
#define RDMAX__RCACHE_IN_LRU 2u    /* on the LRU list (maybe lazily: see the LRU comment) */
#define RDMAX__RCACHE_INVALID 4u   /* memory under it went away: never handed out again */
#define RDMAX__RCACHE_FAST (RDMAX__RCACHE_IN_LOOKUP | RDMAX__RCACHE_IN_LRU)

/* Radix page table over page numbers (36 bits):
     root  [4096] ---- entry covers 2^24 pages
       L1  [512]  ---- entry covers 2^15 pages
         L2 [512] ---- entry covers 2^6 pages
           leaf [64] - entry covers 1 page
   An entry is 0, a child node pointer, or (region pointer | 1). A region is stored at the
   highest level whose aligned block it covers entirely, so a 1 GiB region costs a handful of
   entries and a lookup stops at the first tagged entry. Nodes hold a count of used entries at
   index -1 and are freed when it drops to zero. */
#define RDMAX__RCACHE_PN_BITS 36
#define RDMAX__RCACHE_SHIFT0 24
#define RDMAX__RCACHE_SHIFT1 15
#define RDMAX__RCACHE_SHIFT2 6
#define RDMAX__RCACHE_FAN0 4096u
#define RDMAX__RCACHE_FAN1 512u
#define RDMAX__RCACHE_FAN2 512u
#define RDMAX__RCACHE_FAN3 64u

struct rdmax_rcache {
    /* ---- hot: read by the inline get/put ---- */
    uintptr_t *rdmax__root;
    uint64_t rdmax__seen;  /* how far this cache has read the process-wide event ring */
    uint64_t rdmax__clock; /* LRU clock, ticks at every put to zero */
    uint32_t rdmax__page_shift;
    uint32_t rdmax__thread_safe;
    uint32_t rdmax__over; /* over a limit: puts go the slow way so they can evict */
    uint32_t rdmax__mode; /* desc.mode */
    rdmax_rcache_stats rdmax__stats;
    /* ---- cold ---- */
    rdmax_rcache_desc rdmax__desc;
    rdmax_rcache_region *rdmax__lru_head, *rdmax__lru_tail;
    rdmax_rcache_region *rdmax__all_head;
    rdmax_rcache_region *rdmax__free;
    void *rdmax__slabs;
    pthread_mutex_t rdmax__lock;
};

/* The write cursor of the process-wide event ring (defined in rdmax_impl.h, >>rcache). */
extern uint64_t rdmax__rcache_event_head;

/* ---- rcache: inline definitions ----------------------------------------------------------------- */

/* Lookup of one page number (< 2^36) in the radix table; NULL if no region holds it. */
RDMAX_INLINE rdmax_rcache_region *rdmax__rcache_lookup(const rdmax_rcache *rc, uint64_t pn)
{
    uintptr_t e = rc->rdmax__root[pn >> RDMAX__RCACHE_SHIFT0];
    if (!(e & 1u)) {
        if (!e) return NULL;
        e = ((const uintptr_t *)e)[(pn >> RDMAX__RCACHE_SHIFT1) & (RDMAX__RCACHE_FAN1 - 1u)];
        if (!(e & 1u)) {
            if (!e) return NULL;
            e = ((const uintptr_t *)e)[(pn >> RDMAX__RCACHE_SHIFT2) & (RDMAX__RCACHE_FAN2 - 1u)];
            if (!(e & 1u)) {
                if (!e) return NULL;
                e = ((const uintptr_t *)e)[pn & (RDMAX__RCACHE_FAN3 - 1u)];
                if (!e) return NULL;
            }
        }
    }
    return (rdmax_rcache_region *)(e - 1u);
}

RDMAX_INLINE rdmax_status rdmax_rcache_get(rdmax_rcache *rc, const void *addr, size_t len, unsigned access,
                                           rdmax_rcache_region **out)
{
    uintptr_t a = (uintptr_t)addr;
    uint64_t pn = (uint64_t)a >> rc->rdmax__page_shift;
    if (rdmax_likely(!rc->rdmax__thread_safe &&
                     __atomic_load_n(&rdmax__rcache_event_head, __ATOMIC_RELAXED) == rc->rdmax__seen &&
                     (pn >> RDMAX__RCACHE_PN_BITS) == 0)) {
        rdmax_rcache_region *r = rdmax__rcache_lookup(rc, pn);
        if (rdmax_likely(r != NULL) && len <= r->end - a && (r->access & access) == access) {
            r->refcount++;
            rc->rdmax__stats.hits++;
            *out = r;
            return RDMAX_OK;
        }
    }
    return rdmax__rcache_get_slow(rc, addr, len, access, out);
}

RDMAX_INLINE void rdmax_rcache_release(rdmax_rcache *rc, rdmax_rcache_region *r)
{
    if (rdmax_likely(!rc->rdmax__thread_safe)) {
        if (rdmax_likely(r->refcount > 1u)) {
            r->refcount--;
            return;
        }
        if (rdmax_likely(r->refcount == 1u && r->rdmax__flags == RDMAX__RCACHE_FAST && !rc->rdmax__over)) {
            r->refcount = 0;
            r->rdmax__last_use = ++rc->rdmax__clock;
            return;
        }
    }
    rdmax__rcache_release_slow(rc, r);
}

RDMAX_INLINE void rdmax_rcache_hold(rdmax_rcache *rc, rdmax_rcache_region *r)
{
    if (rdmax_likely(!rc->rdmax__thread_safe)) {
        r->refcount++;
        return;
    }
    rdmax__rcache_hold_slow(rc, r);
}

RDMAX_INLINE int rdmax_rcache_region_valid(const rdmax_rcache_region *r)
{
    return !(__atomic_load_n(&r->rdmax__flags, __ATOMIC_RELAXED) & RDMAX__RCACHE_INVALID);
}

/* ---- profile: private (points, events, log dedupe) ---------------------------------------------- */

/* rdmax__profile_event: the library calls it when an event happened, behind RDMAX__PROFILE_EVENT's
   mask check (so never when nobody registered). type is an rdmax_profile_event. */
RDMAX_API void rdmax__profile_event(rdmax_ctx *ctx, int type, rdmax_ep *ep, uint64_t detail);
/* The registration cache's notify op (rdmax_rcache_ops.notify) for the context's cache: arg is the ctx. */
RDMAX_API void rdmax__profile_rcache_notify(void *arg, int what, const rdmax_rcache_region *r);
/* Frees the context's profile state (and profiles left open) and prints a pending "repeated" line:
   call it at the end of rdmax_ctx_destroy, after the last log call. Safe to call twice. */
RDMAX_API void rdmax__profile_ctx_fini(rdmax_ctx *ctx);
/* rdmax__log_dedupe: called by rdmax__vlog for a message it is about to print (after the level check).
   Returns 1: print msg; 0: msg repeats the previous one of this context and was only counted. Before
   returning it may print (through lg, like rdmax__vlog) "last message repeated N times": when a
   different message ends a run of repeats, or every RDMAX_LOG_REPEAT_MS while a run goes on. */
RDMAX_API int rdmax__log_dedupe(rdmax_ctx *ctx, const rdmax_logger *lg, rdmax_log_level lvl, const char *msg);
#ifndef RDMAX_LOG_REPEAT_MS
#define RDMAX_LOG_REPEAT_MS 10000     /* a run of identical messages prints its count at least this often */
#endif

/* Log dedupe state of one context. */
struct rdmax__log_dd {
    char last[512];             /* the last message printed */
    int lvl;                    /* its level; -1: none yet */
    uint64_t repeats;           /* copies of it suppressed since the last line printed */
    uint64_t since_ns;          /* when that line (the message or a summary) was printed */
    uint64_t suppressed;        /* all suppressed lines, for tests and curiosity */
};

/* Profile state of one context. The owner thread writes it; points are plain increments. */
struct rdmax__prof {
    rdmax_ctx *ctx;             /* the context it belongs to */
    uint32_t event_mask;        /* union of the event types its profiles registered */
    uint32_t in_event;          /* a callback is running */
    rdmax_profile *profs;       /* open profile objects */
    uint64_t point_ticks[RDMAX__PROF_POINT__COUNT];
    uint64_t point_count[RDMAX__PROF_POINT__COUNT];
    struct rdmax__log_dd log;
};

RDMAX_API struct rdmax__prof *rdmax__prof_state_make(rdmax_ctx *ctx);

RDMAX_INLINE struct rdmax__prof *rdmax__prof_state(const rdmax_ctx *ctx)
{
    return ctx->prof;
}
RDMAX_INLINE uint32_t rdmax__prof_event_mask(const rdmax_ctx *ctx)
{
    return ctx->prof_event_mask;
}

/* rdmax__profile_wants: someone registered for events of `type` on ctx. The check to put in front of
   every rdmax__profile_event call: one load and one branch, not taken when nobody listens. */
RDMAX_INLINE bool rdmax__profile_wants(const rdmax_ctx *ctx, int type)
{
    return (rdmax__prof_event_mask(ctx) >> type) & 1u;
}
#define RDMAX__PROFILE_EVENT(ctx, type, ep, detail)                                                        \
    do {                                                                                                   \
        if (rdmax_unlikely(rdmax__profile_wants((ctx), (type))))                                           \
            rdmax__profile_event((ctx), (type), (ep), (detail));                                           \
    } while (0)

/* The cheapest clock: raw TSC ticks on x86 (one instruction, no system call), ns elsewhere. Profile points
   stamp with it (converted at print), and rdmax_progress tests the health pass's due time against it. */
RDMAX_API uint64_t rdmax__prof_now_ns(void);
#if (defined(__x86_64__) || defined(__i386__)) && !defined(RDMAX_PROFILE_CLOCK_MONOTONIC)
#define RDMAX__TICKS_TSC 1
RDMAX_INLINE uint64_t rdmax__ticks(void)
{
    return __builtin_ia32_rdtsc();
}
/* The clock the health pass is due by (rdmax_ctx.tick_at): bits 16..47 of the TSC, units of 65,536
   ticks (about 20 us at 3 GHz), in two instructions where the 64-bit value takes four. Due times are
   compared by signed difference, so only a gap of over half a wrap (7.8 h at 5 GHz) between two progress
   calls could hold a pass back, by as much again. */
RDMAX_INLINE uint32_t rdmax__tick_clock(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc\n\tshrd $16, %%edx, %%eax" : "=a"(lo), "=d"(hi));
    (void)hi;
    return lo;
}
#else
#define RDMAX__TICKS_TSC 0
RDMAX_INLINE uint64_t rdmax__ticks(void)
{
    return rdmax__prof_now_ns();
}
RDMAX_INLINE uint32_t rdmax__tick_clock(void)
{
    return (uint32_t)(rdmax__prof_now_ns() >> 16);
}
#endif

RDMAX_INLINE void rdmax__prof_add(rdmax_ctx *ctx, unsigned point, uint64_t ticks)
{
    struct rdmax__prof *st = rdmax__prof_state(ctx);
    if (rdmax_unlikely(st == NULL) && (st = rdmax__prof_state_make(ctx)) == NULL)
        return;
    st->point_ticks[point] += ticks;
    st->point_count[point]++;
}

/* RDMAX__PROF_BEGIN(ctx, POINT); ... RDMAX__PROF_END(ctx, POINT);  POINT is a name from RDMAX__PROF_POINTS.
   Each on a line of its own (tests/profile_objcode.sh strips them by line), as statements of one block,
   BEGIN not right after a label (it declares the start time), one BEGIN of a point per block. Without
   RDMAX_PROFILE both expand to nothing. Defined only if not defined already (both or neither), so a test
   can force them (tests/profile_objcode.sh). */
#if defined(RDMAX__PROF_BEGIN) != defined(RDMAX__PROF_END)
#error "rdmax: define both RDMAX__PROF_BEGIN and RDMAX__PROF_END, or neither"
#elif !defined(RDMAX__PROF_BEGIN) && defined(RDMAX_PROFILE)
#define RDMAX__PROF_BEGIN(ctx, point) const uint64_t rdmax__prof_t0_##point = rdmax__ticks()
#define RDMAX__PROF_END(ctx, point)                                                                        \
    rdmax__prof_add((ctx), RDMAX__PROF_POINT_##point, rdmax__ticks() - rdmax__prof_t0_##point)
#elif !defined(RDMAX__PROF_BEGIN)
#define RDMAX__PROF_BEGIN(ctx, point)
#define RDMAX__PROF_END(ctx, point)
#endif

/* ---- inline fast paths: the definitions --------------------------------------------------------- */

/* A buffer passed without an rdmax_mem: its registration comes from the context's cache (a hit is a
   page-table walk, no lock, no allocation) and is held until the operation completes. */
RDMAX_INLINE rdmax_status rdmax__rcache_lkey(rdmax_ctx *ctx, const void *buf, size_t len, unsigned access,
                                            struct rdmax_rcache_region **region)
{
    if (rdmax_unlikely(ctx->rcache == NULL)) {
        rdmax_status st = rdmax__rcache_open(ctx);
        if (st != RDMAX_OK)
            return st;
    }
    RDMAX__PROF_BEGIN(ctx, RCACHE_GET);
    rdmax_status st = rdmax_rcache_get(ctx->rcache, buf, len ? len : 1, access, region);
    RDMAX__PROF_END(ctx, RCACHE_GET);
    return st;
}

/* The fast paths. Each operation's common case (an inline put or send without a comp, a get or an atomic
   into registered memory without a comp) is one test, the fill of a request prebuilt at creation (the
   put's is the endpoint's, rdmax_ep.wr; the others' the context's, rdmax_ctx.fast_wr: opcode, flags,
   sg_list and next set and kept), and rdmax__fast_post: the slot, the post, the counters. The test asks
   the fast gate (rdmax__fast_gate_open): fast_gate is sig_at while nothing blocks the endpoint, and
   sq_head while anything does (rdmax_ep.blocked: not connected, requests pending, chaining), kept right
   wherever those change (rdmax__ep_regate); so one compare of sq_head says there is a free slot, nothing
   blocks, and this post need not be signaled. Everything else takes the operation's slow path, out of
   line: the post at sig_at (the fast post, signaled), errors, a full queue, pending requests, chained
   posts, comps, registration-cache buffers, scatter/gather, UD. */
#define RDMAX__BLK_STATE 1u    /* not RDMAX_EP_CONNECTED */
#define RDMAX__BLK_PENDING 2u  /* requests wait in the pending queue: a direct post would overtake them */
#define RDMAX__BLK_BATCH 4u    /* chaining (rdmax_batch_begin): requests go to the context's staging */

/* Send-queue slots free. */
RDMAX_INLINE uint32_t rdmax__ep_sq_avail(const rdmax_ep *ep)
{
    return ep->sq_last + 1 - (ep->sq_head - ep->sq_tail);
}

/* Send-CQ entries not yet reserved by a post. */
RDMAX_INLINE uint32_t rdmax__scq_free(const rdmax_ctx *ctx)
{
    return (uint32_t)(ctx->scq_spare + (int32_t)ctx->scq_low);
}

/* fast_gate after a change of blocked, sq_head (out of line) or sig_at: the gate closes at the post that
   must be signaled, which is never beyond the queue's end, so the fast post counts no signal of its own
   and retiring (sq_tail) moves no gate. */
RDMAX_INLINE void rdmax__ep_regate(rdmax_ep *ep)
{
    ep->fast_gate = ep->blocked ? ep->sq_head : ep->sig_at;
}

/* sig_at after a signaled post at sq_head h: signal_interval posts on, or the queue's end if nearer (a
   nearly full queue then signals more often, which frees its slots sooner). rdmax__sig_from: d posts
   on from h, or the queue's end if nearer. */
RDMAX_INLINE uint32_t rdmax__sig_from(const rdmax_ep *ep, uint32_t h, uint32_t d)
{
    uint32_t full = ep->sq_tail + ep->sq_last + 1;
    return full - h < d ? full : h + d;
}
RDMAX_INLINE uint32_t rdmax__sig_next(const rdmax_ep *ep, uint32_t h)
{
    return rdmax__sig_from(ep, h, ep->signal_interval);
}

/* UD endpoints take the general path (their requests carry an address handle): a test only when both
   transports are compiled. */
RDMAX_INLINE int rdmax__ep_is_rc(const rdmax_ep *ep)
{
#if RDMAX__HAS_UD
    return ep->ah == NULL;
#else
    (void)ep;
    return 1;
#endif
}

/* The fast gate is open: a free slot, nothing blocks, not the post at sig_at (one compare); and RC. */
RDMAX_INLINE int rdmax__fast_gate_open(const rdmax_ep *ep)
{
    return ep->sq_head != ep->fast_gate && rdmax__ep_is_rc(ep);
}

/* The fast paths' out-of-line ends (>>post), and each operation's slow path: the post at sig_at as the
   fast path would make it, signaled; else the general path. */
RDMAX_API rdmax_status rdmax__fast_post_signaled(rdmax_ep *ep, struct ibv_send_wr *wr, uint32_t len, uint64_t raddr);
RDMAX_API rdmax_status rdmax__post_refused(rdmax_ep *ep, int rc, uint32_t len);
RDMAX_API rdmax_status rdmax__send_slow(rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *mem,
                                        rdmax_comp *comp);
#if RDMAX__HAS_RC
RDMAX_API rdmax_status rdmax__put_slow(rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *mem,
                                       uint64_t raddr, uint32_t rkey, rdmax_comp *comp);
RDMAX_API rdmax_status rdmax__put_imm_slow(rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *mem,
                                           uint64_t raddr, uint32_t rkey, uint32_t imm, rdmax_comp *comp);
RDMAX_API rdmax_status rdmax__get_slow(rdmax_ep *ep, void *buf, size_t len, const rdmax_mem *mem, uint64_t raddr,
                                       uint32_t rkey, rdmax_comp *comp);
RDMAX_API rdmax_status rdmax__iov_slow(rdmax_ep *ep, rdmax_op op, const rdmax_iov *iov, size_t iovcnt,
                                       uint64_t raddr, uint32_t rkey, rdmax_comp *comp);
RDMAX_API rdmax_status rdmax__atomic_slow(rdmax_ep *ep, rdmax_op op, uint64_t *result, const rdmax_mem *mem,
                                          uint64_t raddr, uint32_t rkey, uint64_t a, uint64_t b, rdmax_comp *comp);
RDMAX_API rdmax_status rdmax__put_chained(rdmax_ep *ep, const void *buf, uint64_t raddr, uint32_t rkey, size_t len);
#endif

/* Post wr, a fast path's prebuilt request that the caller filled, in the send slot at sq_head, and count
   it. Returns the operation's result: RDMAX_OK, or RDMAX_INPROGRESS for a read or an atomic. Only an
   accepted post moves sq_head and a read's budget; the counters count it before the post, so nothing
   needs ctx after the call, and a refusal takes them back with the CQ entry (rdmax__post_refused). sig
   (a constant): the post at sig_at, one in signal_interval (the slow path's); it and every post while
   CQ entries run low are signaled out of line (rdmax__fast_post_signaled: it keeps the length and
   remote address for an error report). */
RDMAX_INLINE rdmax_status rdmax__fast_post(rdmax_ep *ep, struct ibv_send_wr *wr, rdmax_op op, uint32_t len,
                                           uint64_t raddr, int sig)
{
    rdmax_ctx *ctx = ep->ctx;
    uint32_t slot = ep->sq_head & ep->sq_mask;
    if (op == RDMAX_OP_PUT)  /* rdmax_ep.wr: the high half of its wr_id is prebuilt */
        memcpy((char *)&wr->wr_id + RDMAX__WR_ID_LO, &slot, 4);
    else
        wr->wr_id = ep->wr_id_base | slot;
    rdmax__slot_op(&ep->slots[slot], op);
    /* Signaled too while fewer than half the send-CQ entries are free (scq_low, at least 1: so also the
       post that takes the last one; that path refuses a post when none is left): with many endpoints
       each one's share of the entries is below signal_interval, and an endpoint that never reaches its
       signal would hold its entries until the last one forces a completion (rdmax__ep_post). */
    ctx->scq_spare--;  /* this post's CQ entry, given back if it does not happen */
    if (rdmax_unlikely(ctx->scq_spare < 0 || sig))
        return rdmax__fast_post_signaled(ep, wr, len, raddr);
    ctx->cnt.posted[op]++;
    /* post_calls follows from posted[], and an atomic's bytes are 8 x posted (rdmax_ctx_query_counters) */
    if (op != RDMAX_OP_FADD && op != RDMAX_OP_CSWAP)
        ctx->cnt.bytes[op] += len;
    RDMAX__PROF_BEGIN(ctx, POST);
    int rc = ep->post_send(ep->qp, wr, &ep->post_bad);  /* ibv_post_send's target, read once at creation */
    RDMAX__PROF_END(ctx, POST);
    if (rdmax_unlikely(rc != 0))
        return rdmax__post_refused(ep, rc, len);
    ep->sq_head++;
    if (op == RDMAX_OP_SEND) {  /* a send credit spent; the ones we owed went in the immediate data */
        ep->tx_credits--;
        ep->rx_unreturned = 0;
    }
    if (op == RDMAX_OP_GET || op == RDMAX_OP_FADD || op == RDMAX_OP_CSWAP) {
        ep->rd_avail--;
        return RDMAX_INPROGRESS;
    }
    return RDMAX_OK;
}

/* Each fast operation's fill of its prebuilt request, then the post (rdmax__fast_post): one for the fast
   path (sig 0) and its slow path's post at sig_at (sig 1). */
RDMAX_INLINE rdmax_status rdmax__send_fill(rdmax_ep *ep, const void *buf, size_t len, int sig)
{
    rdmax_ctx *ctx = ep->ctx;
    struct ibv_send_wr *wr = &ctx->fast_wr[RDMAX__FWR_SEND];
    wr->imm_data = RDMAX__LE32(ep->rx_unreturned);  /* the credits we owe the peer ride along */
    ctx->fsge.addr = (uintptr_t)buf;
    ctx->fsge.length = (uint32_t)len;
    return rdmax__fast_post(ep, wr, RDMAX_OP_SEND, (uint32_t)len, 0, sig);
}

RDMAX_INLINE rdmax_status rdmax_send(rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *mem,
                                     rdmax_comp *comp)
{
    /* len - 1 < send_inline: one test for len 0, over max_inline and over the peer's receive buffers
       (send_inline is their minimum, 0 on UD); RC: never more sends in flight than the peer has receive
       buffers (no RNR in steady state), and the last credit is kept for a grant */
    if (rdmax_likely(rdmax__fast_gate_open(ep) && len - 1 < ep->send_inline && comp == NULL && buf != NULL &&
                     ep->tx_credits > 1))
        return rdmax__send_fill(ep, buf, len, 0);
    return rdmax__send_slow(ep, buf, len, mem, comp);
}

#if RDMAX__HAS_RC
/* A short put (8 to 16 bytes) into chain entry e: its data copied as two words that may overlap (the
   buffer is promised free at once), its length and remote fields (the rest of the request is set for
   it: rdmax__chain_entry). The caller writes the wr_id's low half (the send slot) and gives the slot its
   op. */
RDMAX_INLINE void rdmax__chain_entry_put(rdmax__chain_entry *e, const void *buf, size_t len, uint64_t raddr,
                                         uint32_t rkey)
{
    uint64_t w0, w1;
    memcpy(&w0, buf, 8);
    memcpy(&w1, (const char *)buf + len - 8, 8);
    memcpy(e->inl, &w0, 8);
    memcpy((char *)e->inl + len - 8, &w1, 8);
    e->sge[0].length = (uint32_t)len;
    e->wr.wr.rdma.remote_addr = raddr;
    e->wr.wr.rdma.rkey = rkey;
}

/* A put of a post list (rdmax_batch_begin; rdmax_put saw ep is the context's batch_ep) with 8 to 16
   bytes of inline data and no comp, while the chain has room (rdmax_ctx.chain_next, chain_end: entries,
   send slots and CQ entries counted out when it opened, rdmax__chain_open, only with blocked ==
   RDMAX__BLK_BATCH, i.e. connected and nothing pending, and max_inline >= 16; what blocks ep otherwise
   closes it: rdmax__ep_block): written into its entry (rdmax__chain_entry_put). Its CQ entry and send slot
   were reserved at the opening; its slot (sq_head, the slot's op, the wr_id), its count in posted[],
   batch_n and its signal wait for the chain's close (rdmax__chain_close, rdmax__room_settle), which
   comes before anything else touches ep. Anything else: rdmax__put_chained, out of line.
   rdmax__put_chain_at: the put into entry e, the room's next (rdmax__put_chained: its first). */
RDMAX_INLINE rdmax_status rdmax__put_chain_at(rdmax_ctx *ctx, rdmax__chain_entry *e, const void *buf, size_t len,
                                              uint64_t raddr, uint32_t rkey)
{
    rdmax__chain_entry_put(e, buf, len, raddr, rkey);
    ctx->chain_next = e + 1;
    ctx->cnt.bytes[RDMAX_OP_PUT] += len;
    return RDMAX_OK;
}
RDMAX_INLINE rdmax_status rdmax__put_chain(rdmax_ep *ep, rdmax_ctx *ctx, const void *buf, size_t len, uint64_t raddr,
                                           uint32_t rkey)
{
    rdmax__chain_entry *e = ctx->chain_next;
    /* len - 8 > 8: one test for below 8 and above 16 (it wraps below 8) */
    if (rdmax_unlikely(e == ctx->chain_end || len - 8 > 8))
        return rdmax__put_chained(ep, buf, raddr, rkey, len);
    return rdmax__put_chain_at(ctx, e, buf, len, raddr, rkey);
}

RDMAX_INLINE rdmax_status rdmax__put_fill(rdmax_ep *ep, const void *buf, size_t len, uint64_t raddr, uint32_t rkey,
                                          int sig)
{
    struct ibv_send_wr *wr = &ep->wr;
    ep->ctx->fsge.addr = (uintptr_t)buf;  /* wr's one SGE */
    ep->ctx->fsge.length = (uint32_t)len;
    wr->wr.rdma.remote_addr = raddr;
    wr->wr.rdma.rkey = rkey;
    return rdmax__fast_post(ep, wr, RDMAX_OP_PUT, (uint32_t)len, raddr, sig);
}

RDMAX_INLINE rdmax_status rdmax_put(rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *mem,
                                    uint64_t raddr, uint32_t rkey, rdmax_comp *comp)
{
    /* len - 1 < max_inline: one test for len 0 and too long (len - 1 wraps for 0) */
    if (rdmax_likely(rdmax__fast_gate_open(ep) && len - 1 < ep->max_inline && comp == NULL && buf != NULL))
        return rdmax__put_fill(ep, buf, len, raddr, rkey, 0);
    /* a post list's short put stays inline: out of line, a call and rdmax__put_slow's saves cost ~33 more */
    if (ep == ep->ctx->batch_ep && comp == NULL && buf != NULL)
        return rdmax__put_chain(ep, ep->ctx, buf, len, raddr, rkey);
    return rdmax__put_slow(ep, buf, len, mem, raddr, rkey, comp);
}

RDMAX_INLINE rdmax_status rdmax_put_imm(rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *mem,
                                        uint64_t raddr, uint32_t rkey, uint32_t imm, rdmax_comp *comp)
{
    return rdmax__put_imm_slow(ep, buf, len, mem, raddr, rkey, imm, comp);
}

RDMAX_INLINE rdmax_status rdmax_put_iov(rdmax_ep *ep, const rdmax_iov *iov, size_t iovcnt, uint64_t raddr,
                                        uint32_t rkey, rdmax_comp *comp)
{
    return rdmax__iov_slow(ep, RDMAX_OP_PUT, iov, iovcnt, raddr, rkey, comp);
}

RDMAX_INLINE rdmax_status rdmax__get_fill(rdmax_ep *ep, void *buf, size_t len, const rdmax_mem *mem, uint64_t raddr,
                                          uint32_t rkey, int sig)
{
    rdmax_ctx *ctx = ep->ctx;
    struct ibv_send_wr *wr = &ctx->fast_wr[RDMAX__FWR_GET];
    ctx->fsge.addr = (uintptr_t)buf;
    ctx->fsge.length = (uint32_t)len;
    ctx->fsge.lkey = mem->lkey;
    wr->wr.rdma.remote_addr = raddr;
    wr->wr.rdma.rkey = rkey;
    return rdmax__fast_post(ep, wr, RDMAX_OP_GET, (uint32_t)len, raddr, sig);
}

RDMAX_INLINE rdmax_status rdmax_get(rdmax_ep *ep, void *buf, size_t len, const rdmax_mem *mem, uint64_t raddr,
                                    uint32_t rkey, rdmax_comp *comp)
{
    /* one test for len 0 and len too long (len - 1 wraps for 0); a page is under every device's
       max_msg_sz (2^31 on rxe and the RoCE NICs), so a constant length of at most a page costs no test */
    if (rdmax_likely((len - 1 < 4096u || len - 1 < ep->ctx->attr.max_msg_sz) && mem != NULL && comp == NULL &&
                     buf != NULL && rdmax__fast_gate_open(ep) && ep->rd_avail != 0))
        return rdmax__get_fill(ep, buf, len, mem, raddr, rkey, 0);
    return rdmax__get_slow(ep, buf, len, mem, raddr, rkey, comp);
}

RDMAX_INLINE rdmax_status rdmax_get_iov(rdmax_ep *ep, const rdmax_iov *iov, size_t iovcnt, uint64_t raddr,
                                        uint32_t rkey, rdmax_comp *comp)
{
    return rdmax__iov_slow(ep, RDMAX_OP_GET, iov, iovcnt, raddr, rkey, comp);
}

/* op: RDMAX_OP_FADD (a: the addend; b unused) or RDMAX_OP_CSWAP (a: compare, b: swap). */
RDMAX_INLINE rdmax_status rdmax__atomic_fill(rdmax_ep *ep, rdmax_op op, uint64_t *result, const rdmax_mem *mem,
                                             uint64_t raddr, uint32_t rkey, uint64_t a, uint64_t b, int sig)
{
    rdmax_ctx *ctx = ep->ctx;
    /* two constant indexes: a computed one (fast_wr[op == ... ? ...]) hides from the compiler that wr is
       not in ep, and costs fadd and cswap two reloads of ep's fields */
    struct ibv_send_wr *wr = op == RDMAX_OP_FADD ? &ctx->fast_wr[RDMAX__FWR_FADD] : &ctx->fast_wr[RDMAX__FWR_CSWAP];
    ctx->asge.addr = (uintptr_t)result;  /* its length, 8, set at creation */
    ctx->asge.lkey = mem->lkey;
    wr->wr.atomic.remote_addr = raddr;
    wr->wr.atomic.rkey = rkey;
    wr->wr.atomic.compare_add = a;
    if (op == RDMAX_OP_CSWAP)
        wr->wr.atomic.swap = b;
    return rdmax__fast_post(ep, wr, op, 8, raddr, sig);
}

RDMAX_INLINE rdmax_status rdmax_fadd(rdmax_ep *ep, uint64_t *result, const rdmax_mem *mem, uint64_t raddr,
                                     uint32_t rkey, uint64_t add, rdmax_comp *comp)
{
    if (rdmax_likely(rdmax__fast_gate_open(ep) && !(raddr & 7) && mem != NULL && result != NULL && comp == NULL &&
                     ep->rd_avail != 0))
        return rdmax__atomic_fill(ep, RDMAX_OP_FADD, result, mem, raddr, rkey, add, 0, 0);
    return rdmax__atomic_slow(ep, RDMAX_OP_FADD, result, mem, raddr, rkey, add, 0, comp);
}

RDMAX_INLINE rdmax_status rdmax_cswap(rdmax_ep *ep, uint64_t *result, const rdmax_mem *mem, uint64_t raddr,
                                      uint32_t rkey, uint64_t compare, uint64_t swap, rdmax_comp *comp)
{
    if (rdmax_likely(rdmax__fast_gate_open(ep) && !(raddr & 7) && mem != NULL && result != NULL && comp == NULL &&
                     ep->rd_avail != 0))
        return rdmax__atomic_fill(ep, RDMAX_OP_CSWAP, result, mem, raddr, rkey, compare, swap, 0);
    return rdmax__atomic_slow(ep, RDMAX_OP_CSWAP, result, mem, raddr, rkey, compare, swap, comp);
}
#endif /* RDMAX__HAS_RC */

RDMAX_INLINE void rdmax_batch_begin(rdmax_ep *ep)
{
    rdmax__batch_begin(ep);  /* out of line: with the opening of the room for short puts */
}

RDMAX_INLINE rdmax_status rdmax_batch_end(rdmax_ep *ep)
{
    if (!(ep->blocked & RDMAX__BLK_BATCH))
        return RDMAX_OK;
    return rdmax__batch_end(ep);  /* out of line: the post */
}

/* The send CQ's poll itself, counted: the provider's result as it gave it. */
RDMAX_INLINE int rdmax__scq_poll(rdmax_ctx *ctx)
{
    RDMAX__PROF_BEGIN(ctx, POLL);
    int n = ctx->scq_poll(ctx->scq, 16, ctx->wc);  /* ibv_poll_cq */
    RDMAX__PROF_END(ctx, POLL);
    ctx->cnt.polls++;
    return n;
}

/* The send CQ, polled inline into ctx->wc: the completions polled (0 when none, or on an error, counted
   as an empty poll). */
RDMAX_INLINE int rdmax__poll_send_raw(rdmax_ctx *ctx)
{
    int n = rdmax__scq_poll(ctx);
    if (rdmax_likely(n <= 0)) {
        ctx->cnt.empty_polls++;
        return 0;
    }
    return n;
}

/* The send CQ, polled inline: an empty poll costs no call of rdmax's own; completions are handled out of
   line (rdmax__send_cqes). */
RDMAX_INLINE int rdmax__poll_send_fast(rdmax_ctx *ctx)
{
    int n = rdmax__poll_send_raw(ctx);
    return n ? rdmax__send_cqes(ctx, (uint64_t)n) : 0;
}

/* UD's own receive queue, polled and handled whole: its completions (0 without UD). */
RDMAX_INLINE int rdmax__poll_ud_fast(rdmax_ctx *ctx)
{
#if RDMAX__HAS_UD
    if (ctx->ud)
        return rdmax__poll_ud(ctx);
#else
    (void)ctx;
#endif
    return 0;
}

/* The receive CQ, polled inline into ctx->rwc (a receive callback may progress again: the receive path
   points rwc at an array of its own while it runs them), so an empty poll needs no stack array: the
   completions polled (0 when it was drained, counted). */
RDMAX_INLINE int rdmax__rcq_poll(rdmax_ctx *ctx)
{
    RDMAX__PROF_BEGIN(ctx, POLL);
    int n = ctx->rcq_poll(ctx->rcq, 16, ctx->rwc);  /* ibv_poll_cq */
    RDMAX__PROF_END(ctx, POLL);
    if (rdmax_likely(n == 0))
        ctx->rcq_drains++;
    return n;
}

/* The receive CQ, polled inline: an empty poll costs no call of rdmax's own; completions are handled
   out of line (rdmax__recv_cqes). */
RDMAX_INLINE int rdmax__poll_recv_fast(rdmax_ctx *ctx)
{
    int ud = rdmax__poll_ud_fast(ctx);
    int n = rdmax__rcq_poll(ctx);
    return rdmax_likely(n == 0) ? ud : ud + rdmax__recv_cqes(ctx, n);
}

/* What rdmax_progress does after the receive CQ: the tick when due, the send CQ, the pending queue.
   Returns the send completions handled. n is not live across a call (the dispatch returns it), so the
   idle path keeps one register: no stack frame but ctx. Completions end in a tail call of
   rdmax__progress_one (a batch of one: no count to pass or test) or rdmax__progress_cqes, which serve
   the pending queue after them. delivered (a constant): the call delivered a message
   (rdmax__progress_recv_one). */
RDMAX_INLINE int rdmax__progress_send(rdmax_ctx *ctx, int delivered)
{
    /* Device events, the watchdog and keepalives: out of line, due by elapsed time rather than by calls,
       so that a caller who spends long between calls (slow callbacks, work of its own) gets them on time. */
    if (rdmax_unlikely((int32_t)(rdmax__tick_clock() - ctx->tick_at) >= 0))
        rdmax__tick_due(ctx);
    /* Send completions that only free resources are polled every 4th call (a busy-waiting caller then
       spins faster and sees a reply sooner); every call when someone waits on a completion object or
       CQ entries run low; never while nothing is outstanding (all CQ entries unreserved). A waited-on
       comp is asked first: one test, and it implies an outstanding request. A call that delivered a
       message keeps to the every-4th rhythm even for a waited-on comp or low entries (one add and its
       test, the rest on the 4th): its caller is busy and calls again, so a poll is at most 3 calls late,
       and a stream of single messages still polls (replies never run out of send slots). */
    if (delivered ? (ctx->lazy_polls += RDMAX__LAZY_STEP) == 0 &&
                        ((int32_t)ctx->comps_out > 0 || (ctx->comps_out == 0 && ctx->scq_spare != ctx->scq_idle))
                  : (int32_t)ctx->comps_out > 0 ||
                        (ctx->scq_spare != ctx->scq_idle && ctx->comps_out == 0 &&
                         ((ctx->lazy_polls += RDMAX__LAZY_STEP) == 0 || ctx->scq_spare < 0))) {
        int n = rdmax__scq_poll(ctx);
        /* one compare against 1 for all three: a batch of one (the common one, asked first), more, or
           none (an error counts as an empty poll, as in rdmax__poll_send_raw) */
        if (n == 1)
            return rdmax__progress_one(ctx);
        if (n > 1)
            return rdmax__progress_cqes(ctx, (uint64_t)n);
        ctx->cnt.empty_polls++;
    }
    if (rdmax_unlikely(!rdmax__arb_is_empty(&ctx->arb)))
        return rdmax__dispatch_then(ctx, 0);
    return 0;
}

RDMAX_INLINE int rdmax_progress(rdmax_ctx *ctx)
{
    RDMAX__PROF_BEGIN(ctx, PROGRESS);
    int ud = rdmax__poll_ud_fast(ctx);
    int n = rdmax__rcq_poll(ctx);
    /* after receive completions (out of line already) the rest is out of line too */
    if (rdmax_likely(n == 0))
        n = rdmax_likely(ud == 0) ? rdmax__progress_send(ctx, 0) : rdmax__progress_more(ctx, ud);
    else
        n = ud + rdmax__progress_recv(ctx, n);
    RDMAX__PROF_END(ctx, PROGRESS);
    return n;
}

#ifdef __cplusplus
}
#endif
#endif /* RDMAX_H_INCLUDED */

#if defined(RDMAX_IMPLEMENTATION) && !defined(RDMAX_IMPL_INCLUDED)
#define RDMAX_IMPL_INCLUDED
#include "rdmax_impl.h"
#endif

/* LICENSE
   MIT License. Copyright (c) 2026 the rdmax authors.
   Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
   associated documentation files (the "Software"), to deal in the Software without restriction, including
   without limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
   copies of the Software, and to permit persons to whom the Software is furnished to do so, subject to the
   following conditions: The above copyright notice and this permission notice shall be included in all
   copies or substantial portions of the Software. THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY
   KIND, EXPRESS OR IMPLIED.
*/
