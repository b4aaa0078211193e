// A JVM heap paged by `tiermem run`: MIB (the first argument) of long-lived
// arrays, each word a function of its place, checked word by word twice,
// with a gigabyte of garbage allocated between the passes and a full
// collection, so that the collector copies and compacts the live arrays
// through tiered memory. Prints "OK ..." and exits 0, or "FAIL ..." and 1.
public class HeapCheck {
    // 256 KiB of longs: below half a G1 region, so not a humongous object.
    static final int WORDS = 32768;

    static long word(int block, int i) {
        return block * 1_000_003L + i * 7L + (long) (block ^ i) << 20;
    }

    static long check(long[][] blocks) {
        long wrong = 0;
        for (int b = 0; b < blocks.length; b++)
            for (int i = 0; i < WORDS; i++)
                if (blocks[b][i] != word(b, i)) wrong++;
        return wrong;
    }

    public static void main(String[] args) {
        int mib = Integer.parseInt(args[0]);
        long[][] blocks = new long[mib * 4][];
        for (int b = 0; b < blocks.length; b++) {
            blocks[b] = new long[WORDS];
            for (int i = 0; i < WORDS; i++) blocks[b][i] = word(b, i);
        }
        long wrong = check(blocks);
        long sink = 0;
        for (int g = 0; g < 1024; g++) {
            byte[] garbage = new byte[1 << 20];
            garbage[g % garbage.length] = (byte) g;
            sink += garbage[(g * 31) % garbage.length];
        }
        System.gc();
        wrong += check(blocks);
        String verdict = wrong == 0 ? "OK" : "FAIL";
        System.out.println(verdict + ": " + mib + " MiB of heap checked twice around 1024 MiB of garbage and a full GC, "
                + wrong + " wrong words (" + (sink & 1) + ")");
        System.exit(wrong == 0 ? 0 : 1);
    }
}
