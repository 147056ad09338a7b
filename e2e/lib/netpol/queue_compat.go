// A replacement for github.com/google/nftables/expr/queue.go, copied over that file in the
// harness's build of kube-network-policies (e2e/lib/build-kube-network-policies.sh).
//
// Some kernels (this machine's among them) are built with nfnetlink_queue and the x_tables
// NFQUEUE target but without the nf_tables queue expression (CONFIG_NFT_QUEUE), so a rule
// with the native `queue` verdict is refused with ENOENT. The same verdict is expressed here
// as the NFQUEUE target (revision 3) through nft_compat, as iptables-nft does. The type and
// its fields stay as they were, so callers compile unchanged.

package expr

import (
	"encoding/binary"

	"github.com/google/nftables/xt"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

type QueueAttribute uint16

type QueueFlag uint16

// Possible QueueAttribute values
const (
	QueueNum   QueueAttribute = unix.NFTA_QUEUE_NUM
	QueueTotal QueueAttribute = unix.NFTA_QUEUE_TOTAL
	QueueFlags QueueAttribute = unix.NFTA_QUEUE_FLAGS

	// The NFQUEUE target's NFQ_FLAG_BYPASS and NFQ_FLAG_CPU_FANOUT have the same values.
	QueueFlagBypass QueueFlag = unix.NFT_QUEUE_FLAG_BYPASS
	QueueFlagFanout QueueFlag = unix.NFT_QUEUE_FLAG_CPU_FANOUT
	QueueFlagMask   QueueFlag = unix.NFT_QUEUE_FLAG_MASK
)

type Queue struct {
	Num   uint16
	Total uint16
	Flag  QueueFlag
}

func (e *Queue) target() *Target {
	if e.Total == 0 {
		e.Total = 1 // as the queue expression defaults; the target refuses 0
	}
	// struct xt_NFQ_info_v3 {__u16 queuenum, queues_total, flags}: host byte order,
	// padded to XT_ALIGN (8 bytes).
	info := make(xt.Unknown, 8)
	binary.NativeEndian.PutUint16(info[0:], e.Num)
	binary.NativeEndian.PutUint16(info[2:], e.Total)
	binary.NativeEndian.PutUint16(info[4:], uint16(e.Flag))
	return &Target{Name: "NFQUEUE", Rev: 3, Info: &info}
}

func (e *Queue) marshal(fam byte) ([]byte, error) {
	return e.target().marshal(fam)
}

func (e *Queue) marshalData(fam byte) ([]byte, error) {
	return e.target().marshalData(fam)
}

// unmarshal reads a native queue expression (rules written by other tools); rules written
// through marshal read back as a Target.
func (e *Queue) unmarshal(fam byte, data []byte) error {
	ad, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		return err
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_QUEUE_NUM:
			e.Num = ad.Uint16()
		case unix.NFTA_QUEUE_TOTAL:
			e.Total = ad.Uint16()
		case unix.NFTA_QUEUE_FLAGS:
			e.Flag = QueueFlag(ad.Uint16())
		}
	}
	return ad.Err()
}
