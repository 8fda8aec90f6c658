// CPU per 256 KiB SET: blocking recv (mode 0) vs ppoll over (eventfd, socket, idle socket) then recv (1) vs epoll_wait on the same three, registered once, then recv (2). PRE_PING=US: a PING first, then a pause of US microseconds; REINIT=1: then switch the socket to reno and back (BBR starts afresh).
#define _GNU_SOURCE
#include <sys/eventfd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/resource.h>
#include <sys/epoll.h>
static int conn(int port){int s=socket(AF_INET,SOCK_STREAM,0); struct sockaddr_in ad={0}; ad.sin_family=AF_INET; ad.sin_port=htons(port); ad.sin_addr.s_addr=htonl(0x7f000001); if(connect(s,(void*)&ad,sizeof ad)){perror("connect");exit(1);} int one=1; setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&one,4); return s;}
static double cpu(){struct rusage r; getrusage(RUSAGE_SELF,&r); return r.ru_utime.tv_sec+r.ru_utime.tv_usec*1e-6+r.ru_stime.tv_sec+r.ru_stime.tv_usec*1e-6;}
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){int port=atoi(argv[1]); int mode=atoi(argv[2]); int n=atoi(argv[3]); size_t sz=256*1024;
 char*val=malloc(sz); memset(val,'x',sz); int s=conn(port), idle=conn(port), ev=eventfd(0,0); char hdr[128]; char buf[4096];
 if(mode) fcntl(s,F_SETFL,O_NONBLOCK);
 int ep=epoll_create1(0); if(mode==2){ struct epoll_event e={.events=EPOLLIN}; e.data.u32=0; epoll_ctl(ep,EPOLL_CTL_ADD,ev,&e); e.data.u32=1; epoll_ctl(ep,EPOLL_CTL_ADD,s,&e); e.data.u32=2; epoll_ctl(ep,EPOLL_CTL_ADD,idle,&e);}
 if(getenv("PRE_PING")){ send(s,"*1\r\n$4\r\nPING\r\n",14,0); usleep(2000); recv(s,buf,sizeof buf,MSG_DONTWAIT); usleep(atoi(getenv("PRE_PING"))); if(getenv("REINIT")){ char cur[16]={0}; socklen_t l=sizeof cur; getsockopt(s,IPPROTO_TCP,TCP_CONGESTION,cur,&l); int a=setsockopt(s,IPPROTO_TCP,TCP_CONGESTION,"reno",4); int b=setsockopt(s,IPPROTO_TCP,TCP_CONGESTION,cur,strlen(cur)); fprintf(stderr,"reinit %s: %d %d\n",cur,a,b);} }
 double c0=cpu(), t0=now();
 for(int i=0;i<n;i++){ int hl=sprintf(hdr,"*3\r\n$3\r\nSET\r\n$6\r\nk%05d\r\n$%zu\r\n",i%64,sz); struct iovec iov[3]={{hdr,hl},{val,sz},{"\r\n",2}};
   size_t want=hl+sz+2, sent=0; while(sent<want){ struct msghdr m={0}; /* advance iov */ struct iovec v[3]; int k=0; size_t off=sent; for(int j=0;j<3;j++){ if(off>=iov[j].iov_len){off-=iov[j].iov_len;continue;} v[k].iov_base=(char*)iov[j].iov_base+off; v[k].iov_len=iov[j].iov_len-off; off=0; k++; } m.msg_iov=v; m.msg_iovlen=k;
     ssize_t r=sendmsg(s,&m,MSG_NOSIGNAL|(mode?MSG_DONTWAIT:0)); if(r>0){sent+=r;continue;}
     struct pollfd p[3]={{ev,POLLIN,0},{s,POLLOUT,0},{idle,POLLIN,0}}; ppoll(p,3,NULL,NULL); }
   if(!mode){ recv(s,buf,sizeof buf,0); }
   else if(mode==2){ for(;;){ struct epoll_event out[4]; epoll_wait(ep,out,4,10000); if(recv(s,buf,sizeof buf,MSG_DONTWAIT)>0) break; } }
   else { for(;;){ struct pollfd p[3]={{ev,POLLIN,0},{s,POLLIN,0},{idle,POLLIN,0}}; struct timespec ts={10,0}; ppoll(p,3,&ts,NULL); if(recv(s,buf,sizeof buf,MSG_DONTWAIT)>0) break; } }
 }
 double c=cpu()-c0, t=now()-t0; printf("%s: %.2f us CPU per 256 KiB SET, %.2f us wall\n", mode==2?"epoll_wait(3 kept)+recv":mode?"ppoll(3 fds)+recv":"blocking recv", c/n*1e6, t/n*1e6); }
