#ifndef AGSX_CMD_H
#define AGSX_CMD_H
#endif
