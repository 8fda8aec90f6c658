#include <sys/eventfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
static int a,b,s; static int N=20000; static char cmd[4096]; static int cl;
static void *peer(void*x){ uint64_t v; char buf[4096]; struct pollfd p[2]={{b,POLLIN,0},{s,POLLIN,0}}; for(int i=0;i<N;i++){ p[1].events=0; poll(p,2,-1); read(b,&v,8); send(s,cmd,cl,MSG_DONTWAIT); int got=0; p[1].events=POLLIN; while(got<32){ poll(p,2,-1); int r=recv(s,buf,4096,MSG_DONTWAIT); if(r>0)got+=r;} v=1; write(a,&v,8);} return 0;}
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
int cmp(const void*x,const void*y){double d=*(double*)x-*(double*)y; return d<0?-1:d>0;}
int main(int argc,char**argv){ for(int i=0;i<8;i++) cl+=sprintf(cmd+cl,"*2\r\n$6\r\nEXISTS\r\n$5\r\nkey%02d\r\n",i);
 s=socket(AF_INET,SOCK_STREAM,0); struct sockaddr_in ad={0}; ad.sin_family=AF_INET; ad.sin_port=htons(atoi(argv[1])); ad.sin_addr.s_addr=htonl(0x7f000001); if(connect(s,(void*)&ad,sizeof ad)){perror("c");return 1;} int one=1; setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&one,4);
 a=eventfd(0,0); b=eventfd(0,0); pthread_t t; pthread_create(&t,0,peer,0); static double l[20000]; uint64_t v; struct pollfd p={a,POLLIN,0};
 for(int i=0;i<N;i++){ double st=now(); v=1; write(b,&v,8); poll(&p,1,-1); read(a,&v,8); l[i]=now()-st; usleep(atoi(argv[2]));} qsort(l,N,sizeof(double),cmp); printf("hand-off + 8 EXISTS + hand-off: p50 %.1f us p10 %.1f p90 %.1f\n", l[N/2]*1e6,l[N/10]*1e6,l[N*9/10]*1e6);}
