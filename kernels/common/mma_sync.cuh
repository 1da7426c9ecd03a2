// placeholder: filled by the tensor-core rungs
#pragma once
