import { Type } from "typebox";
import { fileTypes } from "./content.js";
import { auditProperties, identifier } from "./schemas.js";

/** A project's metadata. */
export const projectMetadataSchema = Type.Object(
  { id: identifier, name: Type.String(), ...auditProperties },
  { additionalProperties: false },
);

/** A folder's metadata. */
export const folderMetadataSchema = Type.Object(
  {
    id: identifier,
    name: Type.String(),
    projectId: identifier,
    parentId: Type.Union([identifier, Type.Null()], { description: "Null at the top level of the project." }),
    ...auditProperties,
  },
  { additionalProperties: false },
);

/** The kind of a file. */
export const fileTypeSchema = Type.Enum(fileTypes, {
  description: "bpmn and dmn hold XML; form and connector_template hold a JSON object.",
});

/** A file's metadata. */
export const fileMetadataSchema = Type.Object(
  {
    id: identifier,
    name: Type.String(),
    projectId: identifier,
    folderId: Type.Union([identifier, Type.Null()], { description: "Null at the top level of the project." }),
    simplePath: Type.String({
      description:
        "Project, folders and file name joined by '/'; a '/' inside a name is written '\\/' and a '\\' as '\\\\'.",
    }),
    canonicalPath: Type.Array(Type.Object({ id: identifier, name: Type.String() }, { additionalProperties: false }), {
      description: "The project, then the folders containing the file, from the top down.",
    }),
    revision: Type.Integer({
      minimum: 1,
      description: "Increases with every change; send it back to change the file.",
    }),
    type: fileTypeSchema,
    ...auditProperties,
  },
  { additionalProperties: false },
);

/** A milestone's metadata. */
export const milestoneMetadataSchema = Type.Object(
  { id: identifier, name: Type.String(), fileId: identifier, ...auditProperties },
  { additionalProperties: false },
);

/** The folders and files directly inside a project or folder. */
export const containerContentSchema = Type.Object(
  { folders: Type.Array(folderMetadataSchema), files: Type.Array(fileMetadataSchema) },
  { additionalProperties: false },
);
