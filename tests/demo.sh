#!/bin/sh
# make demo: the RC send ping-pong on soft-RoCE (or the host's own device), beside ib_send_lat from the
# same boot, same device, same size.
cd "$(dirname "$0")/.." || exit 1
mkdir -p build
cat > build/demo-guest.sh <<'G'
#!/bin/sh
dev=${RDMAX_TEST_DEV0:-rxe0}; addr=${RDMAX_TEST_ADDR0:-127.0.0.1}; gid=${RDMAX_TEST_GID_INDEX0:-1}
n=${DEMO_ITERS:-5000}
echo "device $dev, kernel $(uname -r), $n iterations, 8 bytes"
echo
echo "rdmax_pingpong_rc -t send -s 8:"
build/rdmax_pingpong_rc -s 8 -n $n -d $dev -p 18600 > build/demo-server.log 2>&1 &
sleep 1
build/rdmax_pingpong_rc -s 8 -n $n -d $dev -p 18600 $addr; rc=$?
wait
echo
echo "ib_send_lat -s 8 (perftest):"
# perftest estimates the CPU clock from /proc/cpuinfo and timing loops; under emulation that
# estimate is sometimes rejected ("inf" columns), so it gets three tries.
for try in 1 2 3; do
    ib_send_lat -d $dev -x $gid -s 8 -n $n -p 18601 > build/demo-perftest-server.log 2>&1 &
    sleep 1
    ib_send_lat -d $dev -x $gid -s 8 -n $n -p 18601 $addr > build/demo-perftest.log 2>&1
    wait
    grep -q inf build/demo-perftest.log || break
done
sed -n '/#bytes/,$p' build/demo-perftest.log
exit $rc
G
chmod +x build/demo-guest.sh
exec tests/vm/run --timeout 900 -- build/demo-guest.sh
