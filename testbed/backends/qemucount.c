/*
 * IPsec Testbed: the counted backend's instruction counter, a plugin of QEMU's emulator (TCG).
 *
 * It counts every instruction the guest executes, kernel and user alike (one inline add per instruction,
 * placed by the translator), and, when the guest executes the marker instruction
 *
 *     nopl 0x4942544d(%rax,%rax,1)      0f 1f 84 00 4d 54 42 49      ("MTBI": a NOP no compiler emits)
 *
 * it copies the count into `marked`, the host's monotonic clock into `marked_ns` and its real-time clock into
 * `marked_unix_ns`, and bumps `marks`, at that very instruction of the guest's stream.  At the clock marker
 *
 *     nopl 0x49425443(%rax,%rax,1)      0f 1f 84 00 43 54 42 49      ("CTBI")
 *
 * it notes the host's two clocks only: how a guest, whose own clock counts instructions, reads the user's.  The
 * page is a file (its path is the plugin's argument counts=PATH) that QEMU also maps into the guest as an ivshmem
 * device's memory: the guest's CPU meter executes the marker and then reads `marked` there with a load, no host
 * round trip in between (testbed/counting.py).
 *
 * Written against QEMU's plugin interface version 1 (QEMU 7.x, Debian 12's qemu-system-x86), declared here
 * for the few calls it makes: Debian ships no plugin header.  Built by testbed/backends/qemu.py with the
 * host's gcc on first use.
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef uint64_t plugin_id;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
struct qemu_info;
enum cb_flags { CB_NO_REGS = 0 };
enum inline_op { INLINE_ADD_U64 = 0 };

void qemu_plugin_register_vcpu_tb_trans_cb(plugin_id id, void (*cb)(plugin_id, struct qemu_plugin_tb *));
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *insn, enum inline_op op, void *ptr,
                                                uint64_t imm);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, void (*cb)(unsigned int, void *),
                                            enum cb_flags flags, void *userdata);

EXPORT int qemu_plugin_version = 1;

/* The shared page: what the host reads. */
struct counts {
    volatile uint64_t count;   /* instructions executed so far */
    volatile uint64_t marked;  /* `count` at the last marker */
    volatile uint64_t marks;   /* markers executed so far */
    volatile uint64_t marked_ns; /* the host's CLOCK_MONOTONIC at the last marker */
    volatile uint64_t marked_unix_ns; /* the host's CLOCK_REALTIME at the last marker */
};

static struct counts *counts;
static const unsigned char MARKER[8] = {0x0f, 0x1f, 0x84, 0x00, 'M', 'T', 'B', 'I'};
static const unsigned char CLOCK_MARKER[8] = {0x0f, 0x1f, 0x84, 0x00, 'C', 'T', 'B', 'I'};

static void note_clocks(void)
{
    struct timespec now, unix_now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    clock_gettime(CLOCK_REALTIME, &unix_now);
    counts->marked_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    counts->marked_unix_ns = (uint64_t)unix_now.tv_sec * 1000000000u + (uint64_t)unix_now.tv_nsec;
}

static void at_marker(unsigned int vcpu, void *userdata)
{
    (void)vcpu;
    (void)userdata;
    counts->marked = counts->count;
    note_clocks();
    counts->marks++;
}

static void at_clock_marker(unsigned int vcpu, void *userdata)
{
    (void)vcpu;
    (void)userdata;
    note_clocks();
}

static void translated(plugin_id id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        qemu_plugin_register_vcpu_insn_exec_inline(insn, INLINE_ADD_U64, (void *)&counts->count, 1);
        if (qemu_plugin_insn_size(insn) != sizeof MARKER) {
            continue;
        }
        if (memcmp(qemu_plugin_insn_data(insn), MARKER, sizeof MARKER) == 0) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, at_marker, CB_NO_REGS, NULL);
        } else if (memcmp(qemu_plugin_insn_data(insn), CLOCK_MARKER, sizeof CLOCK_MARKER) == 0) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, at_clock_marker, CB_NO_REGS, NULL);
        }
    }
}

EXPORT int qemu_plugin_install(plugin_id id, const struct qemu_info *info, int argc, char **argv)
{
    (void)info;
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "counts=", 7) == 0) {
            path = argv[i] + 7;
        }
    }
    if (path == NULL) {
        return -1;
    }
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    void *page = mmap(NULL, sizeof(struct counts), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (page == MAP_FAILED) {
        return -1;
    }
    counts = page;
    qemu_plugin_register_vcpu_tb_trans_cb(id, translated);
    return 0;
}
