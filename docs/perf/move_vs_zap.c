/* The price of evicting with UFFDIO_MOVE instead of a batched MADV_DONTNEED.
 *
 * Evicts batches of 64 random resident pages of a 256 MiB userfaultfd
 * region, alternating two ways: one process_madvise(MADV_DONTNEED) over
 * the 64 pages (one TLB shootdown), or one UFFDIO_MOVE per page into a
 * registered staging range (one shootdown each) and one MADV_DONTNEED of
 * the staging range. With a second thread of the process running on
 * CPU 0 (argument 1, the default), every shootdown is an IPI to it.
 *
 *   cc -O2 -pthread docs/perf/move_vs_zap.c -o move_vs_zap && ./move_vs_zap 1 && ./move_vs_zap 0
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <linux/userfaultfd.h>
#ifndef UFFD_FEATURE_MOVE
#define UFFD_FEATURE_MOVE (1<<10)
struct uffdio_move { __u64 dst, src, len, mode; __s64 move; };
#define UFFDIO_MOVE _IOWR(0xAA, 0x05, struct uffdio_move)
#endif
#define PG 4096UL
#define NPAGES (65536UL)
#define BATCH 64
static volatile int stop;
static char *other;
static void *spinner(void *a){cpu_set_t s;CPU_ZERO(&s);CPU_SET(0,&s);sched_setaffinity(0,sizeof s,&s);
 unsigned long i=0; while(!stop){other[(i*64)%(1<<20)]++; i++;} return 0;}
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
 int spin = argc>1 ? atoi(argv[1]) : 1;
 cpu_set_t s;CPU_ZERO(&s);CPU_SET(1,&s);sched_setaffinity(0,sizeof s,&s);
 int uffd=syscall(SYS_userfaultfd,O_CLOEXEC|O_NONBLOCK);
 struct uffdio_api api={.api=UFFD_API,.features=UFFD_FEATURE_MOVE};
 if(ioctl(uffd,UFFDIO_API,&api)){perror("api");return 1;}
 char *r=mmap(0,NPAGES*PG,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
 char *st=mmap(0,BATCH*PG,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
 other=mmap(0,1<<20,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_POPULATE,-1,0);
 struct uffdio_register reg={.range={(unsigned long)r,NPAGES*PG},.mode=UFFDIO_REGISTER_MODE_MISSING};
 if(ioctl(uffd,UFFDIO_REGISTER,&reg)){perror("reg");return 1;}
 struct uffdio_register reg2={.range={(unsigned long)st,BATCH*PG},.mode=UFFDIO_REGISTER_MODE_MISSING};
 if(ioctl(uffd,UFFDIO_REGISTER,&reg2)){perror("reg2");return 1;}
 int pidfd=syscall(SYS_pidfd_open,getpid(),0);
 pthread_t th; if(spin) pthread_create(&th,0,spinner,0);
 srand(1);
 double tm[2]={0,0}; long n[2]={0,0}, busy=0;
 for(int round=0;round<400;round++){
  int mode=round&1;
  unsigned long idx[BATCH];
  for(int i=0;i<BATCH;i++){ idx[i]=(unsigned long)rand()%NPAGES; for(int j=0;j<i;j++) if(idx[j]==idx[i]){i--;break;} }
  for(int i=0;i<BATCH;i++){ struct uffdio_zeropage z={.range={(unsigned long)r+idx[i]*PG,PG}}; ioctl(uffd,UFFDIO_ZEROPAGE,&z); r[idx[i]*PG]=1; }
  double t0=now();
  if(mode==0){ struct iovec iov[BATCH]; for(int i=0;i<BATCH;i++){iov[i].iov_base=r+idx[i]*PG;iov[i].iov_len=PG;}
    long rc=syscall(SYS_process_madvise,pidfd,iov,BATCH,MADV_DONTNEED,0); if(rc<0){perror("pm");return 1;} }
  else { for(int i=0;i<BATCH;i++){ struct uffdio_move m={.dst=(unsigned long)st+i*PG,.src=(unsigned long)r+idx[i]*PG,.len=PG,.mode=0};
      if(ioctl(uffd,UFFDIO_MOVE,&m)){ if(errno==EBUSY) busy++; else {perror("move");return 1;} } }
    madvise(st,BATCH*PG,MADV_DONTNEED); }
  tm[mode]+=now()-t0; n[mode]+=BATCH;
 }
 stop=1; if(spin) pthread_join(th,0);
 printf("spinner=%d dontneed %.2f us/page, move+dontneed %.2f us/page, busy %ld\n",spin,tm[0]/n[0]*1e6,tm[1]/n[1]*1e6,busy);
 return 0;}
